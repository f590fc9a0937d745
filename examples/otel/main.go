// Command otel is an HTTP service instrumented with OpenTelemetry (otelhttp
// and a tracer of its own) that feeds spanwatch through one added line: the
// spanwatch SpanProcessor on its TracerProvider. Every OpenTelemetry span
// (the server span of each request and the db.query spans inside it)
// reaches spanwatch with its trace id, so an overrun's stack comes with the
// trace the tracing backend shows.
//
//	go run ./examples/otel -listen 127.0.0.1:8081
//	sudo spanwatch run --config examples/otel/rules.yaml --output -
//	go run ./examples/otel -load 30s -target http://127.0.0.1:8081
//
// Routes: GET /orders/{id} (a db.query child span of 1-3 ms; every 25th
// query waits 300 ms for a lock, over its 50 ms budget and the request's
// 100 ms; every 10th order answers 500) and GET /health (no database).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	spanwatchotel "github.com/spanwatch/spanwatch/emit/otel"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "serve on `ADDR`")
	load := flag.Duration("load", 0, "instead of serving, send requests to -target for this `DURATION`")
	target := flag.String("target", "http://127.0.0.1:8081", "the service -load sends requests to")
	rate := flag.Int("rate", 100, "requests per second -load sends")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *load > 0 {
		ctx, cancel := context.WithTimeout(ctx, *load)
		defer cancel()
		n, failed := generateLoad(ctx, *target, *rate)
		fmt.Printf("sent %d requests, %d answered 5xx\n", n, failed)
		return
	}

	tp := newTracerProvider()
	defer tp.Shutdown(context.Background())
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("serving on http://%s", ln.Addr())
	if err := serve(ctx, ln, tp); err != nil {
		log.Fatal(err)
	}
}

// newTracerProvider is the service's tracing setup. The spanwatch line is
// the only one spanwatch needs; a real service keeps its exporters (OTLP,
// say) next to it.
func newTracerProvider(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(append(opts,
		// The one line: hand every ended span to spanwatch, with the
		// route folded into server span names ("GET" -> "GET /orders/{id}"
		// where the instrumentation named the span by method only).
		sdktrace.WithSpanProcessor(spanwatchotel.NewSpanProcessor(spanwatchotel.Config{Fold: []attribute.Key{"http.route"}})),
	)...)
}

// newHandler returns the service's routes, traced by otelhttp.
func newHandler(tp trace.TracerProvider) http.Handler {
	tracer := tp.Tracer("examples/otel")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		// The trace id, for the caller to find the trace (and the test
		// to match spanwatch's overrun against).
		w.Header().Set("X-Trace-Id", trace.SpanContextFromContext(r.Context()).TraceID().String())
		order, err := loadOrder(r.Context(), tracer, r.PathValue("id"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, order)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	return otelhttp.NewHandler(mux, "http.server", otelhttp.WithTracerProvider(tp))
}

func serve(ctx context.Context, ln net.Listener, tp trace.TracerProvider) error {
	srv := &http.Server{Handler: newHandler(tp), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

var queries, orders atomic.Uint64

// loadOrder is the database call: a db.query span of its own.
func loadOrder(ctx context.Context, tracer trace.Tracer, id string) (string, error) {
	_, sp := tracer.Start(ctx, "db.query", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.operation.name", "SELECT")))
	defer sp.End()
	if queries.Add(1)%25 == 0 {
		time.Sleep(300 * time.Millisecond) // a lock wait
	} else {
		time.Sleep(time.Millisecond + rand.N(2*time.Millisecond))
	}
	if orders.Add(1)%10 == 0 {
		err := fmt.Errorf("order %s: row locked", id)
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
		return "", err
	}
	return "order " + id, nil
}

// generateLoad sends GET /orders/N at rate per second until ctx ends.
func generateLoad(ctx context.Context, target string, rate int) (sent, failed int) {
	client := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return sent, failed
		case <-tick.C:
		}
		resp, err := client.Get(fmt.Sprintf("%s/orders/%d", target, i))
		sent++
		if err != nil || resp.StatusCode >= 500 {
			failed++
		}
		if err == nil {
			resp.Body.Close()
		}
	}
}
