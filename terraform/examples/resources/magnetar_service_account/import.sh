# By full resource name, or by the path of ids: acme/ci
terraform import magnetar_service_account.ci organizations/acme/serviceAccounts/ci
