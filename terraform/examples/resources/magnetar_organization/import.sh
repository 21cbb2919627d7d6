# By full resource name, or by id: acme
terraform import magnetar_organization.acme organizations/acme
