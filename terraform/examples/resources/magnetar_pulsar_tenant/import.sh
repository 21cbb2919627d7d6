# By full resource name, or: acme/dev/shop
terraform import magnetar_pulsar_tenant.shop organizations/acme/clusters/dev/tenants/shop
