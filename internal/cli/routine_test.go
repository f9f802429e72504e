package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func TestRoutineWatchEndsAreLeftOutOfTheEngineLogAndErrorsAreNot(t *testing.T) {
	var out bytes.Buffer
	logger := zap.New(zap.WriteTo(&out), zap.RawZapOpts(uberzap.WrapCore(func(c zapcore.Core) zapcore.Core { return routineFilter{c} })))
	cache := logger.WithName("controller-runtime.cache").WithValues("type", "*engine.compactObject")
	cache.Info("Warning: watch ended with error", "reflector", "pkg/mod/k8s.io/client-go@v0.37.2/tools/cache/reflector.go:343", "err", "http2: client connection force closed")
	cache.Info("a line of its own")
	cache.Error(errors.New("boom"), "Warning: watch ended with error")
	said := out.String()
	if strings.Contains(said, "reflector.go") {
		t.Errorf("a routine watch end was written:\n%s", said)
	}
	if !strings.Contains(said, "a line of its own") || !strings.Contains(said, "boom") {
		t.Errorf("other lines, or an error, were left out:\n%s", said)
	}
}
