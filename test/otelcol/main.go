// Command otelcol is an OpenTelemetry Collector's OTLP receiver, built
// from the Collector's own Go modules, that prints every log record and
// profile it receives as OTLP/JSON, one batch a line, on stdout (a line
// holds resourceLogs, or resourceProfiles and the profiles' dictionary).
// Profiles are the receiver's development signal (xreceiver, xconsumer),
// served at /v1development/profiles. The otlp package's
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
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/collector/receiver/xreceiver"
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
	emit := func(b []byte, err error) error {
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		_, err = fmt.Printf("%s\n", b)
		return err
	}
	logs, err := consumer.NewLogs(func(_ context.Context, ld plog.Logs) error {
		return emit((&plog.JSONMarshaler{}).MarshalLogs(ld))
	})
	if err != nil {
		return err
	}
	profiles, err := xconsumer.NewProfiles(func(_ context.Context, pd pprofile.Profiles) error {
		return emit((&pprofile.JSONMarshaler{}).MarshalProfiles(pd))
	})
	if err != nil {
		return err
	}
	set := receivertest.NewNopSettings(f.Type())
	// The factory makes one receiver for one config: the logs and the
	// profiles receivers are the same server, started once.
	r, err := f.CreateLogs(ctx, set, cfg, logs)
	if err != nil {
		return err
	}
	if _, err := f.(xreceiver.Factory).CreateProfiles(ctx, set, cfg, profiles); err != nil {
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
