resource "magnetar_pulsar_sink" "archive" {
  namespace           = magnetar_pulsar_namespace.orders.id
  sink_id             = "archive"
  package_url         = "https://packages.example.com/connectors/archive-sink.nar"
  class_name          = "com.example.ArchiveSink"
  inputs              = ["persistent://shop/orders/payments"]
  configs             = jsonencode({ bucket = "orders-archive" })
  max_message_retries = 5
  dead_letter_topic   = "persistent://shop/orders/payments-dlq"
}
