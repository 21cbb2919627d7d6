# By full resource name, or: acme/dev/shop/orders/generator
terraform import magnetar_pulsar_source.generator organizations/acme/clusters/dev/tenants/shop/namespaces/orders/sources/generator
