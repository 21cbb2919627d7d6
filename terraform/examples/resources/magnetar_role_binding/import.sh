# By full resource name, or: acme/ci-producer
terraform import magnetar_role_binding.ci_producer organizations/acme/roleBindings/ci-producer
