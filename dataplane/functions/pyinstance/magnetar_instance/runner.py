"""Consuming, calling the user's function, producing and acknowledging.

Threads: the Pulsar client's listener thread hands each message to
``_on_message``, which counts it and puts it on a bounded queue; one
executor thread (``_execute``) takes messages off it in order, calls the
function and publishes the result. Output publishes complete on a client
thread, which acknowledges the input (``_published``).

Acknowledgement by processing guarantee:

* ATLEAST_ONCE: after the output was persisted (or at once when there is
  no output); a user exception, a serde failure or a failed publish
  negatively acknowledges, so the message is redelivered, up to
  retryDetails.maxMessageRetries times before it goes to the dead-letter
  topic when those are set.
* ATMOST_ONCE: when the message is received.
* MANUAL: never by the instance; the user calls context.ack(). Failures
  are still negatively acknowledged.
* EFFECTIVELY_ONCE: refused at start (ConfigError).

autoAck=false with ATLEAST_ONCE or ATMOST_ONCE behaves as MANUAL, which is
what Pulsar's Python instance does with that (deprecated) combination.
"""

import base64
import logging
import queue
import re
import threading
import time

import pulsar

from . import loader
from .pb import function_pb2 as fpb

log = logging.getLogger(__name__)

DEFAULT_SERDE = "serde.IdentitySerDe"
INPUT_TOPIC_PROPERTY = "__pfn_input_topic__"
INPUT_MSG_ID_PROPERTY = "__pfn_input_msg_id__"
_MIN_ACK_TIMEOUT_MS = 10000  # the client's lower bound for unacked_messages_timeout_ms


class ConfigError(Exception):
    """The FunctionDetails cannot be run by this instance."""


class _Input:
    __slots__ = ("topic", "serde", "schema", "consumer")

    def __init__(self, topic, serde, schema):
        self.topic = topic
        self.serde = serde
        self.schema = schema
        self.consumer = None


class _Item:
    __slots__ = ("message", "input")

    def __init__(self, message, inp):
        self.message = message
        self.input = inp


class Runner:
    def __init__(self, *, details, client, function, context, stats, package_path=None,
                 max_buffered=1, user_scope=None, instance_id="0"):
        self.details = details
        self._client = client
        self._function = function
        self._context = context
        self._stats = stats
        self._package_path = package_path
        self._user_scope = user_scope
        self._instance_id = instance_id
        g = details.processingGuarantees
        if g == fpb.EFFECTIVELY_ONCE:
            raise ConfigError("processing guarantee EFFECTIVELY_ONCE is not supported by the Python instance "
                              "(as in Apache Pulsar); use ATLEAST_ONCE or MANUAL")
        self.manual = g == fpb.MANUAL or (not details.autoAck and g in (fpb.ATLEAST_ONCE, fpb.ATMOST_ONCE))
        if not details.autoAck and g in (fpb.ATLEAST_ONCE, fpb.ATMOST_ONCE):
            log.warning("autoAck is false with %s: the function acknowledges messages itself (as MANUAL)",
                        fpb.ProcessingGuarantees.Name(g))
        self.atmost_once = g == fpb.ATMOST_ONCE and not self.manual
        self.atleast_once = g == fpb.ATLEAST_ONCE and not self.manual
        self._queue = queue.Queue(max(1, int(max_buffered)))
        self._stopping = threading.Event()
        self._thread = None
        self._inputs = []
        self.consumers = {}  # configured topic -> consumer
        self._producer = None
        self._output_serde = None
        self._output_schema = None

    # --- start and stop --------------------------------------------------------

    def subscribe(self):
        """Creates the input consumers (the listeners start delivering at
        once; messages wait in the queue until start())."""
        d = self.details
        src = d.source
        sub = src.subscriptionName.strip() or "%s/%s/%s" % (d.tenant, d.namespace, d.name)
        ctype = pulsar.ConsumerType.Shared
        if src.subscriptionType == fpb.FAILOVER or d.retainOrdering:
            ctype = pulsar.ConsumerType.Failover
        elif src.subscriptionType == fpb.KEY_SHARED or d.retainKeyOrdering:
            ctype = pulsar.ConsumerType.KeyShared
        position = pulsar.InitialPosition.Latest
        if src.subscriptionPosition == fpb.EARLIEST or d.subscriptionPosition == fpb.EARLIEST:
            position = pulsar.InitialPosition.Earliest
        common = dict(consumer_type=ctype, initial_position=position,
                      properties=producer_properties(d, self._instance_id))
        if src.timeoutMs > 0:
            common["unacked_messages_timeout_ms"] = max(int(src.timeoutMs), _MIN_ACK_TIMEOUT_MS)
        if src.negativeAckRedeliveryDelayMs > 0:
            common["negative_ack_redelivery_delay_ms"] = int(src.negativeAckRedeliveryDelayMs)
        if d.HasField("retryDetails") and d.retryDetails.maxMessageRetries > 0:
            common["dead_letter_policy"] = pulsar.ConsumerDeadLetterPolicy(
                max_redeliver_count=d.retryDetails.maxMessageRetries,
                dead_letter_topic=d.retryDetails.deadLetterTopic or None)

        specs = []  # (topic, serde name, is regex, ConsumerSpec or None)
        for topic, serde in src.topicsToSerDeClassName.items():
            specs.append((topic, serde, False, None))
        if src.topicsPattern:
            specs.append((src.topicsPattern, "", True, None))
        for topic, spec in src.inputSpecs.items():
            specs.append((topic, spec.serdeClassName, spec.isRegexPattern, spec))
        if not specs:
            raise ConfigError("the function has no input topics (source.inputSpecs is empty)")

        for topic, serde_name, is_regex, spec in specs:
            schema = None
            if spec is not None and spec.schemaType:
                schema = _schema(spec.schemaType, src.typeClassName, self._package_path)
            inp = _Input(topic, loader.load_serde(serde_name or DEFAULT_SERDE, self._package_path), schema)
            kwargs = dict(common)
            kwargs["message_listener"] = self._listener(inp)
            if schema is not None:
                kwargs["schema"] = schema
            if spec is not None and spec.HasField("receiverQueueSize"):
                kwargs["receiver_queue_size"] = spec.receiverQueueSize.value
            target = re.compile(topic) if is_regex else topic
            log.info("subscribing to %s%s as %s (%s, %s)", "pattern " if is_regex else "", topic, sub,
                     ctype.name, position.name)
            inp.consumer = self._client.subscribe(target, sub, **kwargs)
            self.consumers[topic] = inp.consumer
            self._inputs.append(inp)

    def start(self):
        self._thread = threading.Thread(target=self._execute, name="function-executor", daemon=True)
        self._thread.start()

    def stop(self, timeout=5.0):
        """Stops taking messages, lets the current call finish, flushes the
        output and closes consumers and producers. Messages still buffered
        are not acknowledged, so they are redelivered."""
        self._stopping.set()
        for inp in self._inputs:
            try:
                inp.consumer.pause_message_listener()
            except Exception:
                pass
        if self._thread is not None:
            self._thread.join(timeout)
        if self._producer is not None:
            try:
                self._producer.flush()
                self._producer.close()
            except Exception:
                log.exception("closing the output producer")
        self._context.close()
        for inp in self._inputs:
            try:
                inp.consumer.close()
            except Exception:
                log.exception("closing the consumer of %s", inp.topic)

    # --- receiving ---------------------------------------------------------------

    def _listener(self, inp):
        def on_message(consumer, message):
            self._stats.received()
            item = _Item(message, inp)
            while not self._stopping.is_set():
                try:
                    self._queue.put(item, timeout=0.2)
                    break
                except queue.Full:
                    continue
            else:
                return  # stopping: left unacknowledged for redelivery
            if self.atmost_once:
                consumer.acknowledge(message)
        return on_message

    def _execute(self):
        while not self._stopping.is_set():
            try:
                item = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                self._process(item)
            except Exception as e:  # an instance bug must not stop the function
                log.exception("processing a message failed")
                self._stats.system_exception(e)
                self._nack(item)

    def _process(self, item):
        msg, inp = item.message, item.input
        try:
            value = msg.value() if inp.schema is not None else inp.serde.deserialize(msg.data())
        except Exception as e:
            log.exception("cannot deserialize a message from %s", msg.topic_name())
            self._stats.system_exception(e)
            self._nack(item)
            return
        self._context.set_current_message(msg, inp.consumer)
        self._stats.invocation_started()
        start = time.perf_counter()
        try:
            if self._user_scope is not None:
                with self._user_scope:
                    result = self._function(value, self._context)
            else:
                result = self._function(value, self._context)
        except Exception as e:
            log.exception("the function raised an exception")
            self._stats.user_exception(e)
            self._nack(item)
            return
        self._stats.processed((time.perf_counter() - start) * 1000.0)
        self._emit(result, item)

    # --- output and acknowledgement ------------------------------------------

    def _emit(self, result, item):
        if result is None or not self.details.sink.topic:
            if self.atleast_once:
                item.input.consumer.acknowledge(item.message)
            return
        producer = self._output()
        try:
            payload = result if self._output_schema is not None else self._output_serde.serialize(result)
        except Exception as e:
            log.exception("cannot serialize the function's result")
            self._stats.system_exception(e)
            self._nack(item)
            return
        if payload is None:
            if self.atleast_once:
                item.input.consumer.acknowledge(item.message)
            return
        if self._output_schema is None:
            payload = bytes(payload)
        props = {
            INPUT_TOPIC_PROPERTY: item.message.topic_name(),
            INPUT_MSG_ID_PROPERTY: base64.b64encode(item.message.message_id().serialize()).decode("ascii"),
        }
        if self.details.sink.forwardSourceMessageProperty:
            props = dict(item.message.properties() or {}, **props)
        kwargs = {"properties": props}
        key = item.message.partition_key()
        if key:
            kwargs["partition_key"] = key
        producer.send_async(payload, lambda res, _mid: self._published(res, item), **kwargs)

    def _published(self, result, item):
        if result == pulsar.Result.Ok:
            if self.atleast_once:
                item.input.consumer.acknowledge(item.message)
            return
        try:
            raise RuntimeError("publishing the result to %s failed: %s" % (self.details.sink.topic, result))
        except RuntimeError as e:
            log.error("%s", e)
            self._stats.system_exception(e)
        self._nack(item)

    def _nack(self, item):
        if self.atmost_once:
            return
        try:
            item.input.consumer.negative_acknowledge(item.message)
        except Exception:
            log.exception("negative acknowledgement failed")

    def _output(self):
        if self._producer is not None:
            return self._producer
        sink = self.details.sink
        spec = sink.producerSpec
        if sink.schemaType:
            self._output_schema = _schema(sink.schemaType, sink.typeClassName, self._package_path)
        else:
            self._output_serde = loader.load_serde(sink.serDeClassName or DEFAULT_SERDE, self._package_path)
        kwargs = dict(
            block_if_queue_full=True, batching_enabled=True, batching_max_publish_delay_ms=10,
            send_timeout_millis=0, compression_type=_COMPRESSION.get(spec.compressionType,
                                                                     pulsar.CompressionType.LZ4),
            properties=producer_properties(self.details, self._instance_id))
        if spec.batchBuilder == "KEY_BASED" or spec.batchingSpec.batchBuilder == "KEY_BASED":
            kwargs["batching_type"] = pulsar.BatchingType.KeyBased
        if spec.maxPendingMessages > 0:
            kwargs["max_pending_messages"] = spec.maxPendingMessages
        if spec.maxPendingMessagesAcrossPartitions > 0:
            kwargs["max_pending_messages_across_partitions"] = spec.maxPendingMessagesAcrossPartitions
        if self._output_schema is not None:
            kwargs["schema"] = self._output_schema
        log.info("creating the output producer on %s", sink.topic)
        self._producer = self._client.create_producer(sink.topic, **kwargs)
        return self._producer


_COMPRESSION = {
    fpb.LZ4: pulsar.CompressionType.LZ4,
    fpb.NONE: pulsar.CompressionType.NONE,
    fpb.ZLIB: pulsar.CompressionType.ZLib,
    fpb.ZSTD: pulsar.CompressionType.ZSTD,
    fpb.SNAPPY: pulsar.CompressionType.SNAPPY,
}


def producer_properties(details, instance_id):
    """The properties every consumer and producer of the instance carries
    (what Pulsar's runtimes set, so broker-side tools can tell them apart)."""
    return {
        "application": "pulsar-function",
        "id": "%s/%s/%s" % (details.tenant, details.namespace, details.name),
        "instance_id": str(instance_id),
    }


def _schema(schema_type, type_class_name, package_path):
    """A pulsar.schema for a ConsumerSpec/SinkSpec schemaType: STRING,
    BYTES, JSON or AVRO (of the record class typeClassName), or the name of
    a schema class in the user's code."""
    from pulsar import schema as ps

    t = schema_type.strip()
    low = t.lower()
    if low == "string":
        return ps.StringSchema()
    if low == "bytes":
        return ps.BytesSchema()
    if low in ("json", "avro"):
        if not type_class_name:
            raise ConfigError("schema type %s needs a record class (typeClassName)" % t)
        record = loader.import_object(type_class_name, package_path)
        return ps.JsonSchema(record) if low == "json" else ps.AvroSchema(record)
    cls = loader.import_object(t, package_path)
    return cls()
