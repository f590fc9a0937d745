package usdt_test

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

func ExampleParseArgs() {
	args, err := usdt.ParseArgs(usdt.ArchX86_64, "-4@%eax 8@-16(%rbp) -8@$5 1@%ah 8@(%rax,%rdx,8)")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range args {
		fmt.Println(a)
	}
	// Output:
	// s32 %eax
	// u64 [%rbp-16]
	// s64 5
	// u8 %ah
	// u64 [%rax + %rdx*8]
}

func ExampleParseArgs_arm64() {
	args, _ := usdt.ParseArgs(usdt.ArchARM64, "8@x0 -4@[sp, 16] 2@7")
	for _, a := range args {
		fmt.Println(a)
	}
	// Output:
	// u64 %x0
	// s32 [%sp+16]
	// u16 7
}

func ExampleDecodeSources() {
	var doc yaml.Node
	yaml.Unmarshal([]byte(`
usdt:
  - binary: /usr/sbin/mysqld
    span: query
    start: {provider: mysql, probe: query__start}
    end: {provider: mysql, probe: query__done}
    status_arg: 2
  - binary: /usr/sbin/mysqld
    span: querry
    start: {provider: mysql, probe: query__start}
`), &doc)
	// The usdt: list of the sources: section, as package config hands it
	// over; errors go to the configuration file's decoder.
	d := section.NewDecoder("/etc/spanwatch/rules.yaml", nil)
	srcs := usdt.DecodeSources(d, doc.Content[0].Content[1])
	fmt.Println(len(srcs), d.Err())

	doc = yaml.Node{}
	yaml.Unmarshal([]byte(`
usdt:
  - binary: /usr/sbin/mysqld
    span: query
    start: {provider: mysql, probe: query__start}
    end: {provider: mysql, probe: query__done}
    status_arg: 2
`), &doc)
	srcs = usdt.DecodeSources(section.NewDecoder("/etc/spanwatch/rules.yaml", nil), doc.Content[0].Content[1])
	fmt.Println(srcs[0].Describe())
	// Output:
	// 0 /etc/spanwatch/rules.yaml:8:5: a start/end pair needs both start: and end:
	// usdt span query (mysql:query__start..mysql:query__done in /usr/sbin/mysqld)
}
