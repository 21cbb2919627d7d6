resource "magnetar_pulsar_function" "exclaim" {
  namespace   = magnetar_pulsar_namespace.orders.id
  function_id = "exclaim"
  runtime     = "PYTHON"
  class_name  = "exclaim.Exclaim"
  # The data plane downloads the package; file: URLs are not accepted.
  package_url = "https://packages.example.com/functions/exclaim.py"
  inputs      = ["persistent://shop/orders/payments"]
  output      = "persistent://shop/orders/payments-exclaimed"
  user_config = jsonencode({ suffix = "!" })
  parallelism = 2
  ram_bytes   = 268435456 # 256 MiB per instance
}

output "function_running" {
  value = "${magnetar_pulsar_function.exclaim.num_running}/${magnetar_pulsar_function.exclaim.num_instances}"
}
