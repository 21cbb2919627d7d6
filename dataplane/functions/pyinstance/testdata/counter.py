from pulsar import Function


class CountFunction(Function):
    """Counts each word it sees in state and returns 'word=count'."""

    def process(self, input, context):
        context.incr_counter(input, 1)
        context.put_state("last", input)
        return "%s=%d" % (input, context.get_counter(input))
