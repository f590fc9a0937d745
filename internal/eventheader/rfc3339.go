package eventheader

// MaxTimeLen is the longest time string the decoders parse (a fraction of
// up to 40 digits fits).
const MaxTimeLen = 64

// ParseRFC3339 parses an RFC 3339 date-time: YYYY-MM-DDTHH:MM:SS, an
// optional fraction of any number of digits (nanoseconds are its first
// nine; more are read and dropped), then Z or an offset +HH:MM / -HH:MM.
// T and Z may be lower case. It returns the Unix time in seconds and the
// nanoseconds. The BPF parser (eh_parse_time in bpf/eventheader.h)
// accepts and refuses exactly the same strings, within MaxTimeLen bytes.
func ParseRFC3339(s []byte) (sec int64, nsec uint32, ok bool) {
	if len(s) < 20 || len(s) > MaxTimeLen {
		return 0, 0, false
	}
	num := func(at, n int) (int, bool) {
		v := 0
		for i := at; i < at+n; i++ {
			if s[i] < '0' || s[i] > '9' {
				return 0, false
			}
			v = v*10 + int(s[i]-'0')
		}
		return v, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 2)
	day, ok3 := num(8, 2)
	hour, ok4 := num(11, 2)
	min, ok5 := num(14, 2)
	secs, ok6 := num(17, 2)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 ||
		s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') || s[13] != ':' || s[16] != ':' {
		return 0, 0, false
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(year, month) || hour > 23 || min > 59 || secs > 60 {
		return 0, 0, false
	}
	i := 19
	var ns uint32
	if s[i] == '.' {
		i++
		digits := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if digits < 9 {
				ns = ns*10 + uint32(s[i]-'0')
			}
			digits++
			i++
		}
		if digits == 0 {
			return 0, 0, false
		}
		for d := digits; d < 9; d++ {
			ns *= 10
		}
	}
	if i >= len(s) {
		return 0, 0, false
	}
	off := 0
	switch s[i] {
	case 'Z', 'z':
		i++
	case '+', '-':
		if len(s)-i != 6 || s[i+3] != ':' {
			return 0, 0, false
		}
		oh, ok1 := num(i+1, 2)
		om, ok2 := num(i+4, 2)
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return 0, 0, false
		}
		off = oh*3600 + om*60
		if s[i] == '-' {
			off = -off
		}
		i += 6
	default:
		return 0, 0, false
	}
	if i != len(s) {
		return 0, 0, false
	}
	days := daysFromCivil(year, month, day)
	return days*86400 + int64(hour*3600+min*60+secs) - int64(off), ns, true
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil is the number of days from 1970-01-01 to the given date
// of the proleptic Gregorian calendar (Howard Hinnant's algorithm), for
// years 0 to 9999, in unsigned steps as the BPF side does it: the year is
// shifted by 400 (146097 days) so no intermediate value is negative.
func daysFromCivil(year, month, day int) int64 {
	y := uint64(year) + 400
	if month <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	m := uint64(month)
	if m > 2 {
		m -= 3
	} else {
		m += 9
	}
	doy := (153*m+2)/5 + uint64(day) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era*146097+doe) - 719468 - 146097
}
