resource "magnetar_role_binding" "ci_producer" {
  organization    = magnetar_organization.acme.id
  role_binding_id = "ci-producer"
  role            = "roles/pulsar.producer"
  member          = magnetar_service_account.ci.id
  resource        = magnetar_cluster.dev.id
}
