resource "magnetar_pulsar_namespace" "orders" {
  tenant       = magnetar_pulsar_tenant.shop.id
  namespace_id = "orders"

  policies = {
    retention = {
      time_minutes = 1440
      size_mb      = 1024
    }
    message_ttl_seconds   = 3600
    deduplication_enabled = true
    backlog_quota = {
      limit_bytes = 10737418240
      policy      = "PRODUCER_REQUEST_HOLD"
    }
    auto_topic_creation = {
      allow = false
    }
    schema_compatibility_strategy = "BACKWARD"
  }
}
