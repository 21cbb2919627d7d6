terraform {
  required_providers {
    magnetar = {
      source = "magnetar-dev/magnetar"
    }
  }
}

# Endpoint and key may also come from MAGNETAR_ENDPOINT and
# MAGNETAR_API_KEY (or MAGNETAR_API_KEY_FILE).
provider "magnetar" {
  endpoint     = "127.0.0.1:7080"
  api_key_file = "data/up/bootstrap.key"
}
