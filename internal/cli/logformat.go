package cli

import (
	"bytes"
	"fmt"
	"io"
	stdlog "log"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// The log of opkit run and opkit dev is written in one format, chosen by
// --log-format, by every logger the process has:
//
//   - opkit's own lines (what the commands print: "operator x: running",
//     the engine's notices, warnings), written to the command's log
//     writer;
//   - controller-runtime's logger, and client-go's klog lines routed to it
//     (klog.go);
//   - Go's standard logger (net/http's "TLS handshake error" lines).
//
// text writes each as one human-readable line: opkit's as they are, the
// loggers' as LEVEL, logger name, message and their values. json writes
// each as one JSON object a line, with level, ts, logger and msg: opkit's
// own lines become such objects too, so that a log collector reads every
// line of the process.

// Log formats, of --log-format.
const (
	logText = "text"
	logJSON = "json"
)

// logFormatFlag is --log-format.
type logFormatFlag struct{ format string }

func (f *logFormatFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.format, "log-format", logText, "how the log lines on stderr are written, opkit's, controller-runtime's and client-go's alike: text (one human-readable line each) or json (one JSON object a line)")
}

// validate refuses a format that is neither text nor json.
func (f *logFormatFlag) validate() error {
	if f.format != logText && f.format != logJSON {
		return fmt.Errorf("--log-format %q: want text (one human-readable line each) or json (one JSON object a line)", f.format)
	}
	return nil
}

// writer returns what the command writes its own lines to: stderr for
// text, a writer that makes each line a JSON object for json.
func (f *logFormatFlag) writer(stderr io.Writer) io.Writer {
	if f.format == logJSON {
		return newJSONLines(stderr)
	}
	return stderr
}

// jsonLines is a log writer whose every line is written as a JSON object,
// {"level":"info","ts":...,"logger":"opkit","msg":LINE}, as controller-
// runtime's JSON lines are. A line that begins "warning: " is a warning.
// A line may come in several writes: it is written once it ends.
type jsonLines struct {
	// out receives the JSON lines, and the JSON lines of the loggers that
	// write beside this one (newLogger).
	out    io.Writer
	logger *uberzap.Logger

	mu      sync.Mutex
	pending []byte
}

func newJSONLines(out io.Writer) *jsonLines {
	core := zapcore.NewCore(zapcore.NewJSONEncoder(jsonEncoderConfig()), zapcore.AddSync(out), zapcore.DebugLevel)
	return &jsonLines{out: out, logger: uberzap.New(core).Named("opkit")}
}

func (j *jsonLines) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.pending = append(j.pending, p...)
	for {
		i := bytes.IndexByte(j.pending, '\n')
		if i < 0 {
			return len(p), nil
		}
		j.line(string(j.pending[:i]))
		j.pending = j.pending[i+1:]
	}
}

// line writes one line; an empty one (a blank line between paragraphs of
// text) is left out.
func (j *jsonLines) line(s string) {
	s = strings.TrimRight(s, "\r")
	if strings.TrimSpace(s) == "" {
		return
	}
	if msg, ok := strings.CutPrefix(s, "warning: "); ok {
		j.logger.Warn(msg)
		return
	}
	j.logger.Info(s)
}

// jsonEncoderConfig is controller-runtime's production encoder
// configuration: the keys level, ts, logger, msg, as every JSON line has.
func jsonEncoderConfig() zapcore.EncoderConfig {
	cfg := uberzap.NewProductionEncoderConfig()
	cfg.EncodeTime = zapcore.ISO8601TimeEncoder
	return cfg
}

// textEncoderConfig writes LEVEL logger: message {values}, without a
// time, as opkit's own lines have none.
func textEncoderConfig() zapcore.EncoderConfig {
	return zapcore.EncoderConfig{
		LevelKey:         "level",
		NameKey:          "logger",
		MessageKey:       "msg",
		StacktraceKey:    "stacktrace",
		LineEnding:       zapcore.DefaultLineEnding,
		EncodeLevel:      zapcore.CapitalLevelEncoder,
		EncodeName:       func(name string, enc zapcore.PrimitiveArrayEncoder) { enc.AppendString(name + ":") },
		EncodeDuration:   zapcore.StringDurationEncoder,
		ConsoleSeparator: " ",
	}
}

// newLogger returns controller-runtime's logger, writing to log in log's
// format (a *jsonLines: JSON, beside its lines; else text), with opts.
// Go's standard logger is pointed at log too.
func newLogger(log io.Writer, opts ...zap.Opts) logr.Logger {
	out, enc := log, zapcore.NewConsoleEncoder(textEncoderConfig())
	stdlog.SetFlags(stdlog.LstdFlags)
	if j, ok := log.(*jsonLines); ok {
		out, enc = j.out, zapcore.NewJSONEncoder(jsonEncoderConfig())
		stdlog.SetFlags(0) // the line's ts says when
	}
	stdlog.SetOutput(log)
	return zap.New(append([]zap.Opts{zap.WriteTo(out), zap.Encoder(enc)}, opts...)...)
}

// loggedError is an error that a command has written to its log, in the
// log's format: Main does not print it again.
type loggedError struct{ err error }

func (e *loggedError) Error() string { return e.err.Error() }
func (e *loggedError) Unwrap() error { return e.err }

// logged writes err, if any, to a JSON log as an error line, where Main's
// "opkit: ..." line would be the one line of the log not in JSON; a text
// log leaves it to Main.
func logged(log io.Writer, err error) error {
	j, ok := log.(*jsonLines)
	if !ok || err == nil {
		return err
	}
	j.logger.Error(err.Error())
	return &loggedError{err}
}
