// Command otelcol is an OpenTelemetry Collector's OTLP receiver, built
// from the Collector's own Go modules, that prints every log record it
// receives as OTLP/JSON, one batch a line, on stdout. The otlp package's
// tests run it to check what spanwatch sends against the real receiver.
//
//	go run . -http 127.0.0.1:4318
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

func main() {
	addr := flag.String("http", "127.0.0.1:4318", "OTLP/HTTP listen `ADDR`")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "otelcol:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	setHTTP(cfg, addr)
	var mu sync.Mutex
	var m plog.JSONMarshaler
	logs, err := consumer.NewLogs(func(_ context.Context, ld plog.Logs) error {
		b, err := m.MarshalLogs(ld)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		_, err = fmt.Printf("%s\n", b)
		return err
	})
	if err != nil {
		return err
	}
	r, err := f.CreateLogs(ctx, receivertest.NewNopSettings(f.Type()), cfg, logs)
	if err != nil {
		return err
	}
	if err := r.Start(ctx, componenttest.NewNopHost()); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "otelcol: listening on", addr)
	<-ctx.Done()
	return r.Shutdown(context.Background())
}

// setHTTP turns the HTTP protocol on at addr and gRPC off.
func setHTTP(cfg *otlpreceiver.Config, addr string) {
	h := *cfg.Protocols.HTTP.GetOrInsertDefault()
	h.ServerConfig.NetAddr.Endpoint = addr
	cfg.Protocols.HTTP = configoptional.Some(h)
	cfg.Protocols.GRPC = configoptional.None[configgrpc.ServerConfig]()
}
