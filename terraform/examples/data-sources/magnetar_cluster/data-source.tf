data "magnetar_cluster" "dev" {
  id = "organizations/acme/clusters/dev"
}

output "service_url" {
  value = data.magnetar_cluster.dev.service_url
}
