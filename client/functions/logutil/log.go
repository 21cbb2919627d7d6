package logutil

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/client/functions/internal/logsink"
)

// LevelEnv names the environment variable holding the lowest level written:
// trace, debug, info (the default), warn, error or fatal.
const LevelEnv = "LOGGING_LEVEL"

const timeLayout = "2006/01/02 15:04:05.000"

type level int

const (
	levelTrace level = iota
	levelDebug
	levelInfo
	levelWarn
	levelError
	levelFatal
)

var levelNames = [...]string{"trace", "debug", "info", "warning", "error", "fatal"}

var (
	mu  sync.Mutex // serialises lines on out
	out io.Writer  = os.Stderr
	min            = parseLevel(os.Getenv(LevelEnv))
	// exit ends the process after a Fatal line; replaced in tests.
	exit = os.Exit
)

func parseLevel(s string) level {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "trace":
		return levelTrace
	case "debug":
		return levelDebug
	case "warn", "warning":
		return levelWarn
	case "error":
		return levelError
	case "fatal", "panic":
		return levelFatal
	default:
		return levelInfo
	}
}

// Info logs at level info, formatting its arguments as fmt.Sprint does.
func Info(v ...interface{}) { emit(levelInfo, fmt.Sprint(v...)) }

// Infof logs at level info, formatting as fmt.Sprintf does.
func Infof(format string, v ...interface{}) { emit(levelInfo, fmt.Sprintf(format, v...)) }

// Debug logs at level debug.
func Debug(v ...interface{}) { emit(levelDebug, fmt.Sprint(v...)) }

// Debugf logs at level debug.
func Debugf(format string, v ...interface{}) { emit(levelDebug, fmt.Sprintf(format, v...)) }

// Warn logs at level warning.
func Warn(v ...interface{}) { emit(levelWarn, fmt.Sprint(v...)) }

// Warnf logs at level warning.
func Warnf(format string, v ...interface{}) { emit(levelWarn, fmt.Sprintf(format, v...)) }

// Error logs at level error.
func Error(v ...interface{}) { emit(levelError, fmt.Sprint(v...)) }

// Errorf logs at level error.
func Errorf(format string, v ...interface{}) { emit(levelError, fmt.Sprintf(format, v...)) }

// Fatal logs at level fatal, then ends the process with status 1.
func Fatal(v ...interface{}) {
	emit(levelFatal, fmt.Sprint(v...))
	exit(1)
}

// Fatalf logs at level fatal, then ends the process with status 1.
func Fatalf(format string, v ...interface{}) {
	emit(levelFatal, fmt.Sprintf(format, v...))
	exit(1)
}

// emit writes one line, "<time> [<level>] <message>", to stderr and to the
// log topic when the instance has one.
func emit(l level, msg string) {
	if l < min {
		return
	}
	msg = strings.TrimRight(msg, "\n")
	line := make([]byte, 0, len(timeLayout)+len(msg)+16)
	line = time.Now().AppendFormat(line, timeLayout)
	line = append(line, " ["...)
	line = append(line, levelNames[l]...)
	line = append(line, "] "...)
	line = append(line, msg...)
	logsink.Write(line)
	mu.Lock()
	defer mu.Unlock()
	out.Write(append(line, '\n'))
}
