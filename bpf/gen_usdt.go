package bpf

// The USDT object (usdt.bpf.c) is generated separately from spanwatch.bpf.c:
// the collector loads it beside the core with MapReplacements for the core's
// maps. Regenerate with Debian's clang:
//
//	go generate ./bpf/...
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target amd64,arm64 -type usdt_spec -type usdt_arg_spec -type usdt_source -type usdt_name_seg -type usdt_seg_kind -type usdt_name_sizes -type task_name_buf -type task_span_vals -type usdt_test_record -type usdt_ip_key -type usdt_inflight_key -type usdt_name_key -type usdt_name_request -type usdt_task_spans -type task_span_names -type task_span -type usdt_counter -type usdt_source_flags -type task_spans_sizes -type task_span_flags -type src_pred -type src_term -type src_labels -type src_operands -type src_counter -type span_name -type src_index -type usdt_sizes -type usdt_arg_kind -type usdt_cookie_bits Usdt usdt.bpf.c
