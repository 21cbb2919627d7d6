data "magnetar_pulsar_topic" "payments" {
  id = "organizations/acme/clusters/dev/tenants/shop/namespaces/orders/topics/payments"
}
