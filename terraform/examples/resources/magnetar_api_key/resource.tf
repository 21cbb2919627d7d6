resource "magnetar_api_key" "ci" {
  service_account = magnetar_service_account.ci.id
  api_key_id      = "deploy"
  display_name    = "deploy key"
}

output "ci_api_key" {
  value     = magnetar_api_key.ci.secret
  sensitive = true
}
