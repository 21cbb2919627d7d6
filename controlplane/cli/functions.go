package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

var (
	kindFunction = kind{[]string{"organizations", "clusters", "tenants", "namespaces", "functions"}, []string{"ORG", "CLUSTER", "TENANT", "NS", "FUNCTION"}}
	kindSource   = kind{[]string{"organizations", "clusters", "tenants", "namespaces", "sources"}, []string{"ORG", "CLUSTER", "TENANT", "NS", "SOURCE"}}
	kindSink     = kind{[]string{"organizations", "clusters", "tenants", "namespaces", "sinks"}, []string{"ORG", "CLUSTER", "TENANT", "NS", "SINK"}}
)

// functionsHelp is appended to the function, source and sink commands'
// help.
const functionsHelp = pulsarHelp + ` RUNNING counts the
instances running of those wanted, as the data plane's function workers last
reported them; MESSAGE is why applying failed, or the first failing
instance's error.

Topics are full Pulsar names (persistent://tenant/namespace/topic). Packages
are https:// or http:// URLs the data plane downloads. --ram and --disk take
bytes or a size with a binary suffix (512Mi, 2Gi). The organization's
functions, sources and sinks share its limits of instances and RAM.`

// fieldFlag maps a command-line flag onto a field of the resource message
// (a dotted path: "resources.ram_bytes").
type fieldFlag struct {
	flag, path, usage string
	// immutable flags are offered by create only.
	immutable bool
}

var resourceFlags = []fieldFlag{
	{flag: "cpu", path: "resources.cpu", usage: "CPUs per instance (default 1)"},
	{flag: "ram", path: "resources.ram_bytes", usage: "RAM per instance (default 1Gi)"},
	{flag: "disk", path: "resources.disk_bytes", usage: "disk per instance (default 10Gi)"},
}

var functionFlags = append([]fieldFlag{
	{flag: "runtime", path: "runtime", usage: "JAVA, PYTHON or GO (required; fixed once created)", immutable: true},
	{flag: "class-name", path: "class_name", usage: "the function's class (Java) or module.Class (Python)"},
	{flag: "package-url", path: "package_url", usage: "https:// or http:// URL of the jar, Python file or Go binary"},
	{flag: "inputs", path: "inputs", usage: "input topics, comma-separated"},
	{flag: "output", path: "output", usage: "output topic"},
	{flag: "log-topic", path: "log_topic", usage: "topic the function's logs go to"},
	{flag: "parallelism", path: "parallelism", usage: "number of instances (default 1)"},
	{flag: "processing-guarantees", path: "processing_guarantees", usage: "ATLEAST_ONCE (default), ATMOST_ONCE or EFFECTIVELY_ONCE (fixed once created)", immutable: true},
	{flag: "subscription-name", path: "subscription_name", usage: "subscription on the inputs (fixed once created)", immutable: true},
	{flag: "subscription-position", path: "subscription_position", usage: "LATEST (default) or EARLIEST"},
	{flag: "user-config", path: "user_config", usage: "user config, a JSON object"},
	{flag: "max-message-retries", path: "max_message_retries", usage: "deliveries before a message goes to the dead letter topic"},
	{flag: "dead-letter-topic", path: "dead_letter_topic", usage: "topic of messages that failed max-message-retries times"},
}, resourceFlags...)

var sourceFlags = append([]fieldFlag{
	{flag: "archive", path: "archive", usage: "a builtin connector, builtin://NAME (or give --package-url)"},
	{flag: "package-url", path: "package_url", usage: "https:// or http:// URL of the connector's NAR or jar"},
	{flag: "class-name", path: "class_name", usage: "the source class (default: the connector's)"},
	{flag: "topic", path: "topic", usage: "the topic the source publishes to"},
	{flag: "configs", path: "configs", usage: "the connector's configuration, a JSON object"},
	{flag: "parallelism", path: "parallelism", usage: "number of instances (default 1)"},
	{flag: "processing-guarantees", path: "processing_guarantees", usage: "ATLEAST_ONCE (default), ATMOST_ONCE or EFFECTIVELY_ONCE (fixed once created)", immutable: true},
}, resourceFlags...)

var sinkFlags = append([]fieldFlag{
	{flag: "archive", path: "archive", usage: "a builtin connector, builtin://NAME (or give --package-url)"},
	{flag: "package-url", path: "package_url", usage: "https:// or http:// URL of the connector's NAR or jar"},
	{flag: "class-name", path: "class_name", usage: "the sink class (default: the connector's)"},
	{flag: "inputs", path: "inputs", usage: "input topics, comma-separated"},
	{flag: "configs", path: "configs", usage: "the connector's configuration, a JSON object"},
	{flag: "parallelism", path: "parallelism", usage: "number of instances (default 1)"},
	{flag: "processing-guarantees", path: "processing_guarantees", usage: "ATLEAST_ONCE (default), ATMOST_ONCE or EFFECTIVELY_ONCE (fixed once created)", immutable: true},
	{flag: "subscription-name", path: "subscription_name", usage: "subscription on the inputs (fixed once created)", immutable: true},
	{flag: "subscription-position", path: "subscription_position", usage: "LATEST (default) or EARLIEST"},
	{flag: "max-message-retries", path: "max_message_retries", usage: "deliveries before a message goes to the dead letter topic"},
	{flag: "dead-letter-topic", path: "dead_letter_topic", usage: "topic of messages that failed max-message-retries times"},
}, resourceFlags...)

// registerFieldFlags adds the flags of defs (create: all; update: the
// mutable ones) as strings or string lists.
func registerFieldFlags(fs *pflag.FlagSet, defs []fieldFlag, update bool, desc protoreflect.MessageDescriptor) {
	for _, d := range defs {
		if update && d.immutable {
			continue
		}
		if fieldAt(desc, d.path).IsList() {
			fs.StringSlice(d.flag, nil, d.usage)
		} else {
			fs.String(d.flag, "", d.usage)
		}
	}
}

// fieldAt is the descriptor of a dotted path.
func fieldAt(desc protoreflect.MessageDescriptor, path string) protoreflect.FieldDescriptor {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		desc = desc.Fields().ByName(protoreflect.Name(p)).Message()
	}
	return desc.Fields().ByName(protoreflect.Name(parts[len(parts)-1]))
}

// readFieldFlags sets the fields of msg the given flags name and returns
// their paths (the update mask).
func readFieldFlags(cmd *cobra.Command, defs []fieldFlag, msg proto.Message) ([]string, error) {
	var paths []string
	for _, d := range defs {
		f := cmd.Flags().Lookup(d.flag)
		if f == nil || !f.Changed {
			continue
		}
		if err := setPath(msg.ProtoReflect(), strings.Split(d.path, "."), f); err != nil {
			return nil, usageError(cmd, fmt.Sprintf("--%s: %v", d.flag, err))
		}
		paths = append(paths, d.path)
	}
	return paths, nil
}

func setPath(m protoreflect.Message, parts []string, f *pflag.Flag) error {
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(parts[0]))
	if len(parts) > 1 {
		return setPath(m.Mutable(fd).Message(), parts[1:], f)
	}
	if fd.IsList() {
		vals, _ := f.Value.(pflag.SliceValue)
		l := m.Mutable(fd).List()
		for _, v := range vals.GetSlice() {
			if v = strings.TrimSpace(v); v != "" {
				l.Append(protoreflect.ValueOfString(v))
			}
		}
		return nil
	}
	raw := strings.TrimSpace(f.Value.String())
	var v protoreflect.Value
	switch fd.Kind() {
	case protoreflect.StringKind:
		v = protoreflect.ValueOfString(raw)
	case protoreflect.Int32Kind:
		n, err := strconv.ParseInt(raw, 10, 32)
		if err != nil {
			return fmt.Errorf("want an integer, not %q", raw)
		}
		v = protoreflect.ValueOfInt32(int32(n))
	case protoreflect.Int64Kind:
		n, err := parseBytes(raw)
		if err != nil {
			return err
		}
		v = protoreflect.ValueOfInt64(n)
	case protoreflect.DoubleKind:
		x, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return fmt.Errorf("want a number, not %q", raw)
		}
		v = protoreflect.ValueOfFloat64(x)
	case protoreflect.EnumKind:
		ev := fd.Enum().Values().ByName(protoreflect.Name(strings.ToUpper(raw)))
		if ev == nil || ev.Number() == 0 {
			var names []string
			for i := 1; i < fd.Enum().Values().Len(); i++ {
				names = append(names, string(fd.Enum().Values().Get(i).Name()))
			}
			return fmt.Errorf("want one of %s, not %q", strings.Join(names, ", "), raw)
		}
		v = protoreflect.ValueOfEnum(ev.Number())
	default:
		return fmt.Errorf("unsupported field kind %s", fd.Kind())
	}
	m.Set(fd, v)
	return nil
}

// parseBytes reads bytes, or a size with a binary suffix (Ki, Mi, Gi, Ti).
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	for i, suf := range []string{"Ki", "Mi", "Gi", "Ti"} {
		if strings.HasSuffix(s, suf) {
			mult, s = int64(1)<<(10*(i+1)), strings.TrimSuffix(s, suf)
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want bytes or a size like 512Mi, not %q", s)
	}
	return n * mult, nil
}

// instanceColumns are RUNNING and MESSAGE of a function, source or sink.
func instanceColumns(st *cpv1.FunctionInstanceStatus, msg string) (string, string) {
	running := ""
	if st != nil {
		running = fmt.Sprintf("%d/%d", st.GetNumRunning(), st.GetNumInstances())
		if e := st.GetFirstError(); e != nil && msg == "" {
			msg = fmt.Sprintf("instance %d: %s", e.GetInstanceId(), e.GetMessage())
		}
	}
	return running, msg
}

func functionTable(fns ...*cpv1.PulsarFunction) *table {
	t := &table{header: []string{"NAME", "STATE", "RUNTIME", "PARALLELISM", "RUNNING", "INPUTS", "OUTPUT", "MESSAGE"}}
	for _, f := range fns {
		running, msg := instanceColumns(f.GetStatus(), f.GetStatusMessage())
		t.add(shortName(f.GetName()), enumName(f.GetState(), int32(f.GetState())), enumName(f.GetRuntime(), int32(f.GetRuntime())),
			num(f.GetParallelism()), running, strings.Join(f.GetInputs(), ","), f.GetOutput(), msg)
	}
	return t
}

func sourceTable(srcs ...*cpv1.PulsarSource) *table {
	t := &table{header: []string{"NAME", "STATE", "CONNECTOR", "PARALLELISM", "RUNNING", "TOPIC", "MESSAGE"}}
	for _, s := range srcs {
		running, msg := instanceColumns(s.GetStatus(), s.GetStatusMessage())
		conn := s.GetArchive()
		if conn == "" {
			conn = s.GetPackageUrl()
		}
		t.add(shortName(s.GetName()), enumName(s.GetState(), int32(s.GetState())), conn, num(s.GetParallelism()), running, s.GetTopic(), msg)
	}
	return t
}

func sinkTable(sinks ...*cpv1.PulsarSink) *table {
	t := &table{header: []string{"NAME", "STATE", "CONNECTOR", "PARALLELISM", "RUNNING", "INPUTS", "MESSAGE"}}
	for _, s := range sinks {
		running, msg := instanceColumns(s.GetStatus(), s.GetStatusMessage())
		conn := s.GetArchive()
		if conn == "" {
			conn = s.GetPackageUrl()
		}
		t.add(shortName(s.GetName()), enumName(s.GetState(), int32(s.GetState())), conn, num(s.GetParallelism()), running,
			strings.Join(s.GetInputs(), ","), msg)
	}
	return t
}

// instanceCommands builds create and update of a function, source or sink.
func instanceCommands[T proto.Message](g *globals, k kind, what string, defs []fieldFlag, newMsg func() T,
	create func(ctx context.Context, s *session, parent, id string, m T) (T, error),
	update func(ctx context.Context, s *session, m T, mask *fieldmaskpb.FieldMask) (T, error),
	table func(...T) *table) []*cobra.Command {
	desc := newMsg().ProtoReflect().Descriptor()
	c := &cobra.Command{
		Use:   "create " + k.short() + " [flags]",
		Short: "Create a " + what,
		Args:  nameArgs(k),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			parent, id, err := k.resolveChild(args)
			if err != nil {
				return err
			}
			m := newMsg()
			if _, err := readFieldFlags(s.cmd, defs, m); err != nil {
				return err
			}
			out, err := create(ctx, s, parent, id, m)
			if err != nil {
				return err
			}
			return s.print(out, table(out))
		}),
	}
	registerFieldFlags(c.Flags(), defs, false, desc)
	u := &cobra.Command{
		Use:   "update " + k.short() + " [flags]",
		Short: "Change the fields given of a " + what,
		Long:  "Change the fields given and leave the others as they are; the fields fixed at creation cannot change.",
		Args:  nameArgs(k),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := k.resolve(args)
			if err != nil {
				return err
			}
			m := newMsg()
			m.ProtoReflect().Set(desc.Fields().ByName("name"), protoreflect.ValueOfString(name))
			paths, err := readFieldFlags(s.cmd, defs, m)
			if err != nil {
				return err
			}
			if len(paths) == 0 {
				return usageError(s.cmd, "nothing to change: give a flag")
			}
			out, err := update(ctx, s, m, &fieldmaskpb.FieldMask{Paths: paths})
			if err != nil {
				return err
			}
			return s.print(out, table(out))
		}),
	}
	registerFieldFlags(u.Flags(), defs, true, desc)
	return []*cobra.Command{c, u}
}

func newFunctionCommand() *cobra.Command {
	cmd, g := newGroup("function", "Manage Pulsar Functions of a namespace")
	cmd.Long += functionsHelp
	cmd.AddCommand(instanceCommands(g, kindFunction, "Pulsar Function", functionFlags, func() *cpv1.PulsarFunction { return &cpv1.PulsarFunction{} },
		func(ctx context.Context, s *session, parent, id string, m *cpv1.PulsarFunction) (*cpv1.PulsarFunction, error) {
			return cpv1.NewFunctionsClient(s.conn).CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: parent, FunctionId: id, Function: m})
		},
		func(ctx context.Context, s *session, m *cpv1.PulsarFunction, mask *fieldmaskpb.FieldMask) (*cpv1.PulsarFunction, error) {
			return cpv1.NewFunctionsClient(s.conn).UpdateFunction(ctx, &cpv1.UpdateFunctionRequest{Function: m, UpdateMask: mask})
		}, functionTable)...)
	cmd.AddCommand(crud[*cpv1.PulsarFunction]{
		k: kindFunction,
		get: func(ctx context.Context, s *session, name string) (*cpv1.PulsarFunction, error) {
			return cpv1.NewFunctionsClient(s.conn).GetFunction(ctx, &cpv1.GetFunctionRequest{Name: name})
		},
		page: func(ctx context.Context, s *session, parent, tok string) ([]*cpv1.PulsarFunction, string, error) {
			r, err := cpv1.NewFunctionsClient(s.conn).ListFunctions(ctx, &cpv1.ListFunctionsRequest{Parent: parent, PageToken: tok})
			return r.GetFunctions(), r.GetNextPageToken(), err
		},
		del: func(ctx context.Context, s *session, name string) error {
			_, err := cpv1.NewFunctionsClient(s.conn).DeleteFunction(ctx, &cpv1.DeleteFunctionRequest{Name: name})
			return err
		},
		table:    functionTable,
		list:     func(all []*cpv1.PulsarFunction) proto.Message { return &cpv1.ListFunctionsResponse{Functions: all} },
		delShort: "Delete one (the data plane's function with it)",
	}.commands(g)...)
	return cmd
}

func newSourceCommand() *cobra.Command {
	cmd, g := newGroup("source", "Manage Pulsar IO sources of a namespace")
	cmd.Long += functionsHelp
	cmd.AddCommand(instanceCommands(g, kindSource, "Pulsar IO source", sourceFlags, func() *cpv1.PulsarSource { return &cpv1.PulsarSource{} },
		func(ctx context.Context, s *session, parent, id string, m *cpv1.PulsarSource) (*cpv1.PulsarSource, error) {
			return cpv1.NewSourcesClient(s.conn).CreateSource(ctx, &cpv1.CreateSourceRequest{Parent: parent, SourceId: id, Source: m})
		},
		func(ctx context.Context, s *session, m *cpv1.PulsarSource, mask *fieldmaskpb.FieldMask) (*cpv1.PulsarSource, error) {
			return cpv1.NewSourcesClient(s.conn).UpdateSource(ctx, &cpv1.UpdateSourceRequest{Source: m, UpdateMask: mask})
		}, sourceTable)...)
	cmd.AddCommand(crud[*cpv1.PulsarSource]{
		k: kindSource,
		get: func(ctx context.Context, s *session, name string) (*cpv1.PulsarSource, error) {
			return cpv1.NewSourcesClient(s.conn).GetSource(ctx, &cpv1.GetSourceRequest{Name: name})
		},
		page: func(ctx context.Context, s *session, parent, tok string) ([]*cpv1.PulsarSource, string, error) {
			r, err := cpv1.NewSourcesClient(s.conn).ListSources(ctx, &cpv1.ListSourcesRequest{Parent: parent, PageToken: tok})
			return r.GetSources(), r.GetNextPageToken(), err
		},
		del: func(ctx context.Context, s *session, name string) error {
			_, err := cpv1.NewSourcesClient(s.conn).DeleteSource(ctx, &cpv1.DeleteSourceRequest{Name: name})
			return err
		},
		table:    sourceTable,
		list:     func(all []*cpv1.PulsarSource) proto.Message { return &cpv1.ListSourcesResponse{Sources: all} },
		delShort: "Delete one (the data plane's source with it)",
	}.commands(g)...)
	return cmd
}

func newSinkCommand() *cobra.Command {
	cmd, g := newGroup("sink", "Manage Pulsar IO sinks of a namespace")
	cmd.Long += functionsHelp
	cmd.AddCommand(instanceCommands(g, kindSink, "Pulsar IO sink", sinkFlags, func() *cpv1.PulsarSink { return &cpv1.PulsarSink{} },
		func(ctx context.Context, s *session, parent, id string, m *cpv1.PulsarSink) (*cpv1.PulsarSink, error) {
			return cpv1.NewSinksClient(s.conn).CreateSink(ctx, &cpv1.CreateSinkRequest{Parent: parent, SinkId: id, Sink: m})
		},
		func(ctx context.Context, s *session, m *cpv1.PulsarSink, mask *fieldmaskpb.FieldMask) (*cpv1.PulsarSink, error) {
			return cpv1.NewSinksClient(s.conn).UpdateSink(ctx, &cpv1.UpdateSinkRequest{Sink: m, UpdateMask: mask})
		}, sinkTable)...)
	cmd.AddCommand(crud[*cpv1.PulsarSink]{
		k: kindSink,
		get: func(ctx context.Context, s *session, name string) (*cpv1.PulsarSink, error) {
			return cpv1.NewSinksClient(s.conn).GetSink(ctx, &cpv1.GetSinkRequest{Name: name})
		},
		page: func(ctx context.Context, s *session, parent, tok string) ([]*cpv1.PulsarSink, string, error) {
			r, err := cpv1.NewSinksClient(s.conn).ListSinks(ctx, &cpv1.ListSinksRequest{Parent: parent, PageToken: tok})
			return r.GetSinks(), r.GetNextPageToken(), err
		},
		del: func(ctx context.Context, s *session, name string) error {
			_, err := cpv1.NewSinksClient(s.conn).DeleteSink(ctx, &cpv1.DeleteSinkRequest{Name: name})
			return err
		},
		table:    sinkTable,
		list:     func(all []*cpv1.PulsarSink) proto.Message { return &cpv1.ListSinksResponse{Sinks: all} },
		delShort: "Delete one (the data plane's sink with it)",
	}.commands(g)...)
	return cmd
}
