from pulsar import Function


class ExclamationFunction(Function):
    def process(self, input, context):
        return input + '!'
