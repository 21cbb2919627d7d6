package pf

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/magnetar-dev/magnetar/client/functions/internal/conf"
)

var (
	flags    conf.Flags
	loadOnce sync.Once
	loaded   *conf.Instance
	loadErr  error
)

// The instance flags are defined on the program's command line when the
// function binary starts, so a function that defines flags of its own and
// parses them first still sees -instance-conf accepted.
func init() { flags.Register(flag.CommandLine) }

// instanceConf returns the configuration named on the command line, read
// once.
func instanceConf() (*conf.Instance, error) {
	loadOnce.Do(func() {
		if !flag.Parsed() {
			flag.Parse()
		}
		var c *conf.Conf
		if c, loadErr = flags.Load(); loadErr == nil {
			loaded, loadErr = c.Resolve()
		}
	})
	return loaded, loadErr
}

// Start runs funcName as a function instance, with the configuration the
// worker passes on the command line (-instance-conf '<json>' or
// -instance-conf-path <yaml>), until SIGTERM or SIGINT (Start returns, so
// main returns and the process exits 0), killAfterIdleMs without a message
// (likewise), or the worker's health checks stop (exit 1). Any error at
// start (a function of the wrong shape, a bad configuration, a port in use,
// no broker) is written to stderr as one line and the process exits 1.
//
// funcName must be a func of one of these shapes:
//
//	func()
//	func() error
//	func(input) error
//	func() (output, error)
//	func(input) (output, error)
//	func(context.Context) error
//	func(context.Context, input) error
//	func(context.Context) (output, error)
//	func(context.Context, input) (output, error)
//
// where input is any type a []byte can be assigned to ([]byte, a named
// byte-slice type, interface{}) and receives the message payload, output is
// []byte (or a named byte-slice type) and error is any type implementing
// error. A non-nil output is published to the output topic; a nil one
// publishes nothing. A returned error (or a panic) counts as a user
// exception and the message is negatively acknowledged.
//
// The context.Context of each call carries the FunctionContext (see
// FromContext) and is cancelled when the instance stops. Messages are
// processed one at a time, in the order they arrive.
func Start(funcName interface{}) {
	if err := start(funcName); err != nil {
		fail(err)
	}
}

func start(fn interface{}) error {
	h, err := newHandler(fn)
	if err != nil {
		return err
	}
	cfg, err := instanceConf()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	i, err := newInstance(cfg, h, newLogger(os.Stderr))
	if err != nil {
		return err
	}
	return i.run(ctx)
}

// fail writes err as one line on stderr, where the worker keeps the tail
// of an instance's output for its status, and exits 1.
func fail(err error) {
	fmt.Fprintln(os.Stderr, "pf: "+strings.Join(strings.Fields(err.Error()), " "))
	os.Exit(1)
}

// NewFuncContext returns a FunctionContext for the configuration on the
// command line, for use before Start (Start makes its own). Its
// NewOutputMessage returns nil and RecordMetric does nothing: there is no
// running instance. A bad configuration ends the process as Start does.
func NewFuncContext() *FunctionContext {
	cfg, err := instanceConf()
	if err != nil {
		fail(err)
	}
	st, err := newStateClient(cfg)
	if err != nil {
		fail(err)
	}
	return newFunctionContext(cfg, st)
}

// GetUserConfMap returns the function's user configuration before Start.
func GetUserConfMap() map[string]interface{} { return NewFuncContext().GetUserConfMap() }

// GetUserConfValue returns the value of key in the function's user
// configuration before Start; nil when absent.
func GetUserConfValue(key string) interface{} { return NewFuncContext().GetUserConfValue(key) }

// newLogger returns the instance's own logger: text lines on w, at or above
// the level LOGGING_LEVEL names (default info).
func newLogger(w io.Writer) *slog.Logger {
	lvl := slog.LevelInfo
	switch strings.ToLower(strings.TrimSpace(os.Getenv("LOGGING_LEVEL"))) {
	case "trace", "debug":
		lvl = slog.LevelDebug
	case "warn", "warning":
		lvl = slog.LevelWarn
	case "error", "fatal", "panic":
		lvl = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl}))
}
