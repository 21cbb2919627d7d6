# By full resource name, or: acme/dev/shop/orders
terraform import magnetar_pulsar_namespace.orders organizations/acme/clusters/dev/tenants/shop/namespaces/orders
