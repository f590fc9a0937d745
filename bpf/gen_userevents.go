package bpf

// The user_events object (userevents.bpf.c: spans from any user_event, by
// the field offsets of its format) is generated separately: the collector
// loads it beside the core, with MapReplacements for the core's maps, only
// when user_events sources are configured. Regenerate with Debian's clang:
//
//	go generate ./bpf/...
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target amd64,arm64 -type ue_event -type ue_role -type ue_field -type ue_source -type ue_test_in -type ue_reason -type ue_kind -type ue_role_kind -type tp_map -type src_pred -type src_labels -type ue_sizes Userevents userevents.bpf.c
