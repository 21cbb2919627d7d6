# By full resource name, or: acme/dev/shop/orders/payments
terraform import magnetar_pulsar_topic.payments organizations/acme/clusters/dev/tenants/shop/namespaces/orders/topics/payments
