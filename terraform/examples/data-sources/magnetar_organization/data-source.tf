data "magnetar_organization" "acme" {
  id = "organizations/acme"
}
