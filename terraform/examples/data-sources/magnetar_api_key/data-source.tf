data "magnetar_api_key" "ci" {
  id = "organizations/acme/serviceAccounts/ci/apiKeys/deploy"
}

output "key_state" {
  value = data.magnetar_api_key.ci.state # ACTIVE, REVOKED or EXPIRED
}
