data "magnetar_role_binding" "ci_producer" {
  id = "organizations/acme/roleBindings/ci-producer"
}
