resource "magnetar_service_account" "ci" {
  organization       = magnetar_organization.acme.id
  service_account_id = "ci"
  display_name       = "CI"
  description        = "deploys the shop"
}
