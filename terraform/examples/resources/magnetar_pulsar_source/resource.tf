resource "magnetar_pulsar_source" "generator" {
  namespace = magnetar_pulsar_namespace.orders.id
  source_id = "generator"
  # A connector the data plane has built in; or package_url with class_name.
  archive = "builtin://data-generator"
  topic   = "persistent://shop/orders/generated"
  configs = jsonencode({ sleepBetweenMessages = "1000" })
}
