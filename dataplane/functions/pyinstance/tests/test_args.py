import pytest

from magnetar_instance import args
from magnetar_instance.pb import function_pb2 as fpb

DETAILS = ('{"tenant":"public","namespace":"default","name":"f","className":"m.C",'
           '"processingGuarantees":"MANUAL","source":{"inputSpecs":{"in":{"receiverQueueSize":{"value":5}}}},'
           '"resources":{"ram":"1073741824"},"someFutureField":{"x":1}}')


def worker_argv(**over):
    a = {
        "--py": "/tmp/f.py", "--logging_directory": "/tmp/logs", "--logging_file": "f",
        "--logging_config_file": "/nonexistent.ini", "--instance_id": "0", "--function_id": "id",
        "--function_version": "v", "--function_details": "'" + DETAILS + "'",
        "--pulsar_serviceurl": "pulsar://127.0.0.1:6650", "--max_buffered_tuples": "1024",
        "--port": "9001", "--metrics_port": "9002", "--expected_healthcheck_interval": "30",
        "--cluster_name": "standalone",
    }
    a.update(over)
    out = []
    for k, v in a.items():
        if v is not None:
            out += [k, v]
    return out


def test_worker_command_line_with_quotes_and_short_tls_flag():
    a = args.parse(worker_argv() + ["--use_tls", "false", "--tls_allow_insecure", "true",
                                    "--hostname_verification_enabled", "false",
                                    "--install_usercode_dependencies", "True"])
    assert a.port == 9001 and a.metrics_port == 9002 and a.expected_healthcheck_interval == 30
    assert a.tls_allow_insecure_connection is True and a.use_tls is False
    assert a.install_usercode_dependencies is True
    d = args.parse_function_details(a.function_details)
    assert d.name == "f" and d.processingGuarantees == fpb.MANUAL
    assert d.source.inputSpecs["in"].receiverQueueSize.value == 5
    assert d.resources.ram == 1 << 30


def test_unknown_flags_are_kept_aside():
    a = args.parse(worker_argv() + ["--state_storage_impl_class", "x.Y", "--pending_async_requests", "1000"])
    assert a.unknown == ["--state_storage_impl_class", "x.Y"]


def test_missing_required_flags_are_named():
    with pytest.raises(args.UsageError) as e:
        args.parse(worker_argv(**{"--port": None, "--cluster_name": None}))
    assert "--port" in str(e.value) and "--cluster_name" in str(e.value)


def test_empty_values_count_as_given():
    a = args.parse(worker_argv(**{"--logging_config_file": ""}))
    assert a.logging_config_file == ""


def test_bad_integer():
    with pytest.raises(args.UsageError, match="--port"):
        args.parse(worker_argv(**{"--port": "x"}))


def test_config_file_fills_missing_flags_only(tmp_path):
    cfg = tmp_path / "instance.ini"
    cfg.write_text("[DEFAULT]\nfunction_details = %s\ncluster_name = from-file\nport = 7000\n" % DETAILS)
    a = args.parse(worker_argv(**{"--function_details": None, "--cluster_name": None})
                   + ["--config_file", str(cfg)])
    assert a.cluster_name == "from-file" and a.port == 9001
    assert args.parse_function_details(a.function_details).tenant == "public"


def test_bad_details_json():
    with pytest.raises(args.UsageError, match="function_details"):
        args.parse_function_details("'{\"tenant\": 1'")


def test_strip_quotes_only_one_pair():
    assert args.strip_quotes("''x''") == "'x'"
    assert args.strip_quotes("{}") == "{}"
