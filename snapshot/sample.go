package snapshot

// A Sample is a stack the in-flight sampler took while a span ran past its
// budget, merged with the span's other samples of the same stacks and
// state. An overrun's own stacks say where the span ended (or stood when
// it was reported still running); its samples say where its time went.
type Sample struct {
	// Count is the number of samples with these stacks.
	Count uint64 `json:"count"`
	// WeightNs is the span's wall time the samples stand for: each sample
	// covers the time until the span's next sample (or its end), at most
	// the sampler's period, so the weights of an overrun's samples add up
	// to at most its duration; what they leave is time not sampled (before
	// the span was over its budget, or after its samples ran out).
	WeightNs uint64 `json:"weight_ns"`
	// OffCPU says the thread was off the CPU when sampled: blocked in the
	// kernel (KernelStack says on what) or, for a Go span, its goroutine
	// parked by the Go scheduler (a channel, a lock, a sleep).
	OffCPU      bool    `json:"off_cpu,omitempty"`
	UserStack   []Frame `json:"user_stack,omitempty"`
	KernelStack []Frame `json:"kernel_stack,omitempty"`
}

// SampledNs returns the wall time o's samples stand for.
func (o *Overrun) SampledNs() uint64 {
	var n uint64
	for _, s := range o.Samples {
		n += s.WeightNs
	}
	return n
}
