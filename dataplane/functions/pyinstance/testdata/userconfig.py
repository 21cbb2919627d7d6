from pulsar import Function


class Greeter(Function):
    def process(self, input, context):
        greeting = context.get_user_config_value("greeting")
        context.get_logger().info("greeting %s", input)
        return "%s, %s (%s)" % (greeting, input, context.get_user_config_map().get("suffix"))
