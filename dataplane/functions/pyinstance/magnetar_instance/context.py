"""The Context handed to the user's process(input, context).

It implements every method of pulsar.functions.context.Context (the API
in the pulsar-client wheel), plus get_current_message(),
get_message_partition_index() and get_message_sequence_id() for code
written against newer Pulsar Python instances.

The per-message fields are set by the runner before each call; the
context is used from the function's one executor thread, except publish
callbacks, which run on the Pulsar client's threads.
"""

import json
import logging
import re

from pulsar.functions.context import Context

from . import loader

_PARTITION_SUFFIX = re.compile(r"^(.*)-partition-(\d+)$")


class InstanceContext(Context):
    def __init__(self, *, details, instance_id, function_id, function_version, client, consumers,
                 secrets_provider, state, stats, package_path=None, producer_properties=None,
                 logger=None):
        self._details = details
        self._instance_id = instance_id
        self._function_id = function_id
        self._function_version = function_version
        self._client = client
        self._consumers = consumers  # input topic (as configured) -> consumer
        self._secrets_provider = secrets_provider
        self._state = state
        self._stats = stats
        self._package_path = package_path
        self._producer_properties = producer_properties or {}
        self._logger = logger or logging.getLogger("function")
        self._producers = {}
        self._serdes = {}
        self.user_config = json.loads(details.userConfig) if details.userConfig else {}
        self.secrets_map = json.loads(details.secretsMap) if details.secretsMap else {}
        self._message = None
        self._consumer = None

    # --- set by the runner -------------------------------------------------

    def set_current_message(self, message, consumer):
        self._message = message
        self._consumer = consumer

    def close(self):
        for p in self._producers.values():
            try:
                p.flush()
                p.close()
            except Exception:
                pass
        self._producers.clear()

    # --- the current message -------------------------------------------------

    def get_current_message(self):
        """The pulsar.Message being processed."""
        return self._message

    def get_message_id(self):
        return self._message.message_id() if self._message is not None else None

    def get_message_key(self):
        return self._message.partition_key() if self._message is not None else None

    def get_message_eventtime(self):
        return self._message.event_timestamp() if self._message is not None else None

    def get_message_properties(self):
        return self._message.properties() if self._message is not None else None

    def get_current_message_topic_name(self):
        return self._message.topic_name() if self._message is not None else None

    def get_partition_key(self):
        return self._message.partition_key() if self._message is not None else None

    def get_ordering_key(self):
        return self._message.ordering_key() if self._message is not None else None

    def get_message_partition_index(self):
        """The partition of the current message, -1 for a non-partitioned topic."""
        return self._message.message_id().partition() if self._message is not None else None

    def get_message_sequence_id(self):
        """A sequence id derived from the message id, as Pulsar's runtimes
        compute it: (ledger id << 28) | entry id."""
        if self._message is None:
            return None
        mid = self._message.message_id()
        return (mid.ledger_id() << 28) | mid.entry_id()

    # --- the function ----------------------------------------------------------

    def get_function_tenant(self):
        return self._details.tenant

    def get_function_namespace(self):
        return self._details.namespace

    def get_function_name(self):
        return self._details.name

    def get_function_id(self):
        return self._function_id

    def get_instance_id(self):
        return self._instance_id

    def get_function_version(self):
        return self._function_version

    def get_logger(self):
        return self._logger

    def get_input_topics(self):
        return list(self._details.source.inputSpecs.keys()) + [
            t for t in self._details.source.topicsToSerDeClassName.keys()
            if t not in self._details.source.inputSpecs]

    def get_output_topic(self):
        return self._details.sink.topic

    def get_output_serde_class_name(self):
        return self._details.sink.serDeClassName

    # --- configuration and secrets ----------------------------------------------

    def get_user_config_value(self, key):
        return self.user_config.get(key) if isinstance(self.user_config, dict) else None

    def get_user_config_map(self):
        return self.user_config

    def get_secret(self, secret_name):
        if secret_name not in self.secrets_map:
            return None
        return self._secrets_provider.provide_secret(secret_name, self.secrets_map[secret_name])

    # --- metrics -----------------------------------------------------------------

    def record_metric(self, metric_name, metric_value):
        self._stats.record_user_metric(metric_name, metric_value)

    # --- publishing and acknowledging ---------------------------------------------

    def publish(self, topic_name, message, serde_class_name="serde.IdentitySerDe", properties=None,
                compression_type=None, callback=None, message_conf=None):
        """Serialises message with serde_class_name and sends it to
        topic_name asynchronously. callback(result, message_id), when given,
        runs on a client thread once the broker answered. message_conf holds
        send_async's keyword arguments (properties, partition_key,
        ordering_key, sequence_id, event_timestamp, ...)."""
        import pulsar

        topic_name = str(topic_name)
        producer = self._producers.get(topic_name)
        if producer is None:
            kwargs = dict(block_if_queue_full=True, batching_enabled=True, batching_max_publish_delay_ms=10,
                          properties=dict(self._producer_properties))
            if compression_type is not None:
                kwargs["compression_type"] = compression_type
            producer = self._client.create_producer(topic_name, **kwargs)
            self._producers[topic_name] = producer
        serde = self._serdes.get(serde_class_name)
        if serde is None:
            serde = loader.load_serde(str(serde_class_name), self._package_path)
            self._serdes[serde_class_name] = serde
        payload = bytes(serde.serialize(message))
        conf = dict(message_conf or {})
        if properties:
            conf["properties"] = dict(properties)
        source_id = self.get_message_id()
        stats = self._stats

        def done(result, msg_id):
            if result != pulsar.Result.Ok:
                try:
                    raise RuntimeError("publish to %s failed: %s (while processing message %s)"
                                       % (topic_name, result, source_id))
                except RuntimeError as e:
                    stats.system_exception(e)
                    logging.getLogger(__name__).error("%s", e)
            if callback is not None:
                callback(result, msg_id)

        producer.send_async(payload, done, **conf)

    def ack(self, msgid=None, topic=None):
        """Acknowledges msgid (default: the current message) on the consumer
        of topic (default: the current message's)."""
        if msgid is None:
            msgid = self.get_message_id()
        consumer = self._consumer if topic is None else self._consumer_for(str(topic))
        consumer.acknowledge(msgid)

    def _consumer_for(self, topic):
        c = self._consumers.get(topic)
        if c is not None:
            return c
        m = _PARTITION_SUFFIX.match(topic)
        names = [topic] + ([m.group(1)] if m else [])
        for name in names:
            for configured, consumer in self._consumers.items():
                if _same_topic(configured, name):
                    return consumer
        if self._consumer is not None and len(self._consumers) <= 1:
            return self._consumer
        raise ValueError("no consumer for topic %s" % topic)

    # --- state ---------------------------------------------------------------

    def incr_counter(self, key, amount):
        return self._state.incr(key, amount)

    def get_counter(self, key):
        return self._state.get_counter(key)

    def del_counter(self, key):
        return self._state.delete(key)

    def put_state(self, key, value):
        return self._state.put(key, value)

    def get_state(self, key):
        return self._state.get(key)

    def delete_state(self, key):
        return self._state.delete(key)


def _same_topic(a, b):
    """Whether two topic names mean the same topic (short names are
    persistent://public/default/...)."""
    return _full(a) == _full(b)


def _full(t):
    if "://" in t:
        return t
    parts = t.split("/")
    if len(parts) == 1:
        return "persistent://public/default/" + t
    if len(parts) == 3:
        return "persistent://" + t
    return t
