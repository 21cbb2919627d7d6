# A whole estate on `magnetar up`: an organization with a CI service
# account allowed to produce, one cluster and a topic. See README.md. The
# organization is not the README's or docs/billing.md's, so the quickstart
# applies on the same `magnetar up` after them.
terraform {
  required_providers {
    magnetar = {
      source = "magnetar-dev/magnetar"
    }
  }
}

# MAGNETAR_ENDPOINT (default 127.0.0.1:7080) and MAGNETAR_API_KEY_FILE
# (data/up/bootstrap.key under the directory `magnetar up` ran in).
provider "magnetar" {}

variable "region" {
  type    = string
  default = "regions/local-a"
}

resource "magnetar_organization" "initech" {
  organization_id = "initech"
  display_name    = "Initech"
}

resource "magnetar_service_account" "ci" {
  organization       = magnetar_organization.initech.id
  service_account_id = "ci"
  description        = "publishes payments"
}

resource "magnetar_api_key" "ci" {
  service_account = magnetar_service_account.ci.id
  api_key_id      = "ci"
}

resource "magnetar_cluster" "dev" {
  organization = magnetar_organization.initech.id
  cluster_id   = "dev"
  region       = var.region
  display_name = "Development"
}

resource "magnetar_role_binding" "ci_producer" {
  organization    = magnetar_organization.initech.id
  role_binding_id = "ci-producer"
  role            = "roles/pulsar.producer"
  member          = magnetar_service_account.ci.id
  resource        = magnetar_cluster.dev.id
}

resource "magnetar_pulsar_tenant" "shop" {
  cluster   = magnetar_cluster.dev.id
  tenant_id = "shop"
}

resource "magnetar_pulsar_namespace" "orders" {
  tenant       = magnetar_pulsar_tenant.shop.id
  namespace_id = "orders"
  policies = {
    retention = {
      time_minutes = 60
      size_mb      = 100
    }
    message_ttl_seconds = 3600
  }
}

resource "magnetar_pulsar_topic" "payments" {
  namespace  = magnetar_pulsar_namespace.orders.id
  topic_id   = "payments"
  partitions = 2
}

output "service_url" {
  value = magnetar_cluster.dev.service_url
}

output "topic" {
  value = magnetar_pulsar_topic.payments.pulsar_name
}

output "ci_api_key" {
  value     = magnetar_api_key.ci.secret
  sensitive = true
}
