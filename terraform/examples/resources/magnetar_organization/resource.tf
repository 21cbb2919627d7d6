resource "magnetar_organization" "acme" {
  organization_id = "acme"
  display_name    = "Acme"
}
