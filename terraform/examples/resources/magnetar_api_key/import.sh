# The secret cannot be imported: it is known only when the key is created. Or: acme/ci/deploy
terraform import magnetar_api_key.ci organizations/acme/serviceAccounts/ci/apiKeys/deploy
