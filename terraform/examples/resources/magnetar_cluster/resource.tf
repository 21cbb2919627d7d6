resource "magnetar_cluster" "dev" {
  organization        = magnetar_organization.acme.id
  cluster_id          = "dev"
  region              = "regions/local-a"
  display_name        = "Development"
  brokers             = 1
  bookies             = 1
  deletion_protection = true

  timeouts {
    create = "15m"
    delete = "15m"
  }
}

output "service_url" {
  value = magnetar_cluster.dev.service_url
}
