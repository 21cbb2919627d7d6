from pulsar import Function


class AlwaysFails(Function):
    def process(self, input, context):
        raise ValueError("cannot process %r" % (input,))
