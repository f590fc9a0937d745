//go:build linux

package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkResolver measures a cached lookup (what every series of every
// snapshot costs) against a full walk (what a miss costs, at most once per
// MinRefresh) of a tree shaped like a Kubernetes node: 100 pods of 3
// containers under kubepods slices.
func BenchmarkResolver(b *testing.B) {
	root := b.TempDir()
	var ids []uint64
	for p := range 100 {
		pod := filepath.Join(root, "kubepods.slice", "kubepods-burstable.slice", fmt.Sprintf("kubepods-burstable-pod%08x_0000_0000_0000_000000000000.slice", p))
		for c := range 3 {
			dir := filepath.Join(pod, fmt.Sprintf("cri-containerd-%064x.scope", p*3+c))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			id, _ := ID(dir)
			ids = append(ids, id)
		}
	}
	r, err := NewResolver(Config{Root: root})
	if err != nil {
		b.Fatal(err)
	}
	if info := r.Resolve(ids[0]); info.ContainerID == "" || info.PodUID == "" {
		b.Fatalf("Resolve = %+v", info)
	}
	b.Run("hit", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			r.Resolve(ids[i%len(ids)])
		}
	})
	b.Run("walk-403-cgroups", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := r.Refresh(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
