resource "magnetar_pulsar_topic" "payments" {
  namespace  = magnetar_pulsar_namespace.orders.id
  topic_id   = "payments"
  partitions = 3
}

output "topic" {
  value = magnetar_pulsar_topic.payments.pulsar_name # persistent://shop/orders/payments
}
