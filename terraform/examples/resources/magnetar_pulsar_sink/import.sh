# By full resource name, or: acme/dev/shop/orders/archive
terraform import magnetar_pulsar_sink.archive organizations/acme/clusters/dev/tenants/shop/namespaces/orders/sinks/archive
