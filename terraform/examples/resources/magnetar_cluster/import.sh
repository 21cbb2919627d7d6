# By full resource name, or: acme/dev
terraform import magnetar_cluster.dev organizations/acme/clusters/dev
