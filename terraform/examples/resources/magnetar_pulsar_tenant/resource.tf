resource "magnetar_pulsar_tenant" "shop" {
  cluster     = magnetar_cluster.dev.id
  tenant_id   = "shop"
  admin_roles = ["shop-admin"]
}
