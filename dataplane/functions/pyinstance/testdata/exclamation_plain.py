def process(input):
    return input + "!"
