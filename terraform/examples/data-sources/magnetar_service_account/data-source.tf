data "magnetar_service_account" "ci" {
  id = "organizations/acme/serviceAccounts/ci"
}
