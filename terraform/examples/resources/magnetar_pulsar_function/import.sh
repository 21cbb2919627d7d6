# By full resource name, or: acme/dev/shop/orders/exclaim
terraform import magnetar_pulsar_function.exclaim organizations/acme/clusters/dev/tenants/shop/namespaces/orders/functions/exclaim
