data "magnetar_pulsar_namespace" "orders" {
  id = "organizations/acme/clusters/dev/tenants/shop/namespaces/orders"
}
