// Package javainstance locates the "functions home": the files the
// functions worker needs to run Apache Pulsar's own Java function instance
// (pulsar-functions-runtime 4.2.4) as a child process. Magnetar writes no
// Java; the instance is Pulsar's, resolved from Maven Central.
//
// The home is laid out by setup.sh beside this file, from pom.xml (pinned
// versions) through the local Maven repository (~/.m2). It is never
// committed. Its default place is DefaultDir: $MAGNETAR_FUNCTIONS_HOME, else
// $HOME/.cache/magnetar/functions-4.2.4. Layout:
//
//	java-instance.jar         an empty "pathing" jar whose manifest Class-Path
//	                          holds absolute file: URLs of the root class
//	                          loader's jars: the 4.2.4 API jars (pulsar-io-core,
//	                          pulsar-functions-api, pulsar-client-api, avro,
//	                          jackson, protobuf, gson, slf4j, log4j, ...), then
//	                          pulsar-functions-runtime-all 4.0.8 last, which
//	                          holds JavaInstanceMain (Maven Central serves no
//	                          4.2.4 runtime-all). The worker passes it as -cp.
//	instance-classpath.txt    one line: the colon-separated absolute paths of
//	                          pulsar-functions-runtime 4.2.4 and its closure,
//	                          the value of -Dpulsar.functions.instance.classpath.
//	                          JavaInstanceMain builds a class loader over it.
//	java_instance_log4j2.xml  our log4j2 configuration: each instance logs to
//	                          ${pulsar.function.log.dir}/${pulsar.function.log.file}.log
//	                          and to stdout.
//	connectors/               the connector NARs, <artifact>-4.0.8.nar
//	                          (pulsar-io-data-generator, pulsar-io-jdbc-postgres).
//	examples/                 pulsar-functions-api-examples-4.0.8.jar.
//	VERSION                   key=value lines: versions, a fingerprint of the
//	                          setup inputs, the root jars. Written last; a home
//	                          without it is incomplete.
//
// The instance class path leaves out jars an instance never loads: the
// Kubernetes client (used only by the worker's Kubernetes runtime) and
// rocksdbjni (the RocksDB metadata store), 78 MB of the 225 MB closure.
//
// Callers: the functions worker calls Locate once at start-up and builds
// each instance's command line from the Home it returns. Locate only reads
// the file system; a Home is an immutable value, safe to share between
// goroutines.
package javainstance
