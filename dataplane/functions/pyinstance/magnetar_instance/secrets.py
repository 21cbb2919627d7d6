"""Secrets providers: turn an entry of FunctionDetails.secretsMap into the
secret's value for Context.get_secret.

The worker names the provider with --secrets_provider. Pulsar's names are
understood: ``secretsprovider.ClearTextSecretsProvider`` (the map's value is
the secret) and ``secretsprovider.EnvironmentBasedSecretsProvider`` (the
secret is the environment variable named like the secret), also under their
Java class names. Any other name is imported as ``module.Class`` and must
offer ``init(config)`` and ``provide_secret(secret_name, path_to_secret)``.
"""

import importlib
import os


class ClearTextSecretsProvider:
    """The secretsMap value is the secret itself."""

    def init(self, config):
        pass

    def provide_secret(self, secret_name, path_to_secret):
        return path_to_secret


class EnvironmentBasedSecretsProvider:
    """The secret is the environment variable named like the secret; None
    when it is not set."""

    def init(self, config):
        pass

    def provide_secret(self, secret_name, path_to_secret):
        return os.environ.get(secret_name)


_BUILTIN = {
    "ClearTextSecretsProvider": ClearTextSecretsProvider,
    "EnvironmentBasedSecretsProvider": EnvironmentBasedSecretsProvider,
}


def load(class_name, config):
    """Returns an initialised provider for class_name (clear text when
    empty). config is the decoded --secrets_provider_config, or None."""
    if not class_name:
        provider = ClearTextSecretsProvider()
    else:
        short = class_name.rsplit(".", 1)[-1]
        if short in _BUILTIN and (class_name == short or class_name.startswith(("secretsprovider.",
                                                                               "org.apache.pulsar."))):
            provider = _BUILTIN[short]()
        else:
            module, _, attr = class_name.rpartition(".")
            if not module:
                raise ValueError("secrets provider %r is not module.Class" % class_name)
            provider = getattr(importlib.import_module(module), attr)()
    provider.init(config)
    return provider
