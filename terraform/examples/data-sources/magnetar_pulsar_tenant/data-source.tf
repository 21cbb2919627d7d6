data "magnetar_pulsar_tenant" "shop" {
  id = "organizations/acme/clusters/dev/tenants/shop"
}
