data "magnetar_regions" "all" {}

output "regions" {
  value = [for r in data.magnetar_regions.all.regions : r.name if r.state == "HEALTHY"]
}
