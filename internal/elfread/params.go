package elfread

import (
	"debug/dwarf"
	"fmt"
)

// A Subprogram is a function as DWARF declares it: its name, its
// parameters in order, its result type and its unit's language.
type Subprogram struct {
	Name, LinkageName string
	// Lang is the unit's DW_AT_language (0: not given).
	Lang int64
	// Params are its DW_TAG_formal_parameter children in order, a C++
	// method's artificial this first.
	Params []Param
	// Varargs says a ... follows the parameters.
	Varargs bool
	// Result is the result type; nil for void.
	Result dwarf.Type
}

// A Param is one formal parameter; Type is nil when DWARF gives none.
type Param struct {
	Name       string
	Type       dwarf.Type
	Artificial bool
	// Result says it is a Go function's result (DW_AT_variable_parameter).
	Result bool
}

// MaxEntries bounds the DWARF entries Subprograms walks: a crafted
// .debug_info of tiny entries could otherwise cost minutes.
const MaxEntries = 1 << 24

// maxOrigins bounds the abstract_origin and specification links followed
// from one entry (a chain of them, or a loop, in crafted data).
const maxOrigins = 4

// Subprograms finds in d the functions whose code starts at an address in
// addrs (their DW_AT_low_pc) and, for those not found so, by name (their
// DW_AT_name or DW_AT_linkage_name) among names, when one entry alone has
// that name. It follows an out-of-line copy's abstract origin (an
// optimized function's parameters are declared there) and a definition's
// specification. It walks at most MaxEntries entries (capped says it
// stopped there) and never panics on malformed data.
func Subprograms(d *dwarf.Data, addrs map[uint64]bool, names map[string]bool) (byAddr map[uint64]*Subprogram, byName map[string]*Subprogram, capped bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			byAddr, byName, err = nil, nil, fmt.Errorf("malformed DWARF: %v", p)
		}
	}()
	type found struct {
		off  dwarf.Offset
		lang int64
	}
	atAddr := map[uint64]found{}
	named := map[string][]found{}
	r := d.Reader()
	var lang int64
	for n := 0; ; n++ {
		if n == MaxEntries {
			capped = true
			break
		}
		e, err := r.Next()
		if err != nil {
			return nil, nil, capped, err
		}
		if e == nil {
			break
		}
		switch e.Tag {
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit:
			lang, _ = e.Val(dwarf.AttrLanguage).(int64)
		case dwarf.TagSubprogram:
			if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); decl {
				break
			}
			if pc, ok := e.Val(dwarf.AttrLowpc).(uint64); ok && addrs[pc] {
				if _, dup := atAddr[pc]; !dup {
					atAddr[pc] = found{e.Offset, lang}
				}
			}
			for _, a := range []dwarf.Attr{dwarf.AttrName, dwarf.AttrLinkageName} {
				if s, _ := e.Val(a).(string); names[s] && len(named[s]) < 2 {
					named[s] = append(named[s], found{e.Offset, lang})
				}
			}
		}
	}
	byAddr, byName = map[uint64]*Subprogram{}, map[string]*Subprogram{}
	for pc, f := range atAddr {
		if sp, err := readSubprogram(d, f.off, 0); err == nil {
			sp.Lang = f.lang
			byAddr[pc] = sp
		}
	}
	for name, fs := range named {
		if len(fs) != 1 {
			continue // two functions of that name (static ones in two units)
		}
		if sp, err := readSubprogram(d, fs[0].off, 0); err == nil {
			sp.Lang = fs[0].lang
			byName[name] = sp
		}
	}
	return byAddr, byName, capped, nil
}

// readSubprogram reads the subprogram entry at off and its parameters,
// taking them (and the name and result) from its abstract origin or
// specification when it has one.
func readSubprogram(d *dwarf.Data, off dwarf.Offset, depth int) (*Subprogram, error) {
	r := d.Reader()
	r.Seek(off)
	e, err := r.Next()
	if err != nil {
		return nil, err
	}
	if e == nil || e.Tag != dwarf.TagSubprogram {
		return nil, fmt.Errorf("no subprogram at %#x", off)
	}
	sp := &Subprogram{}
	sp.Name, _ = e.Val(dwarf.AttrName).(string)
	sp.LinkageName, _ = e.Val(dwarf.AttrLinkageName).(string)
	var origin *Subprogram
	for _, a := range []dwarf.Attr{dwarf.AttrAbstractOrigin, dwarf.AttrSpecification} {
		if o, ok := e.Val(a).(dwarf.Offset); ok && depth < maxOrigins && o != off {
			if origin, err = readSubprogram(d, o, depth+1); err != nil {
				return nil, err
			}
			break
		}
	}
	if t, ok := e.Val(dwarf.AttrType).(dwarf.Offset); ok {
		sp.Result, _ = d.Type(t)
	} else if origin != nil {
		sp.Result = origin.Result
	}
	if sp.Name == "" && origin != nil {
		sp.Name = origin.Name
	}
	if sp.LinkageName == "" && origin != nil {
		sp.LinkageName = origin.LinkageName
	}
	if e.Children {
		for n := 0; n < MaxEntries; n++ {
			c, err := r.Next()
			if err != nil {
				return nil, err
			}
			if c == nil || c.Tag == 0 {
				break
			}
			switch c.Tag {
			case dwarf.TagFormalParameter:
				p := Param{}
				p.Name, _ = c.Val(dwarf.AttrName).(string)
				p.Artificial, _ = c.Val(dwarf.AttrArtificial).(bool)
				p.Result, _ = c.Val(dwarf.AttrVarParam).(bool)
				if t, ok := c.Val(dwarf.AttrType).(dwarf.Offset); ok {
					p.Type, _ = d.Type(t)
				}
				sp.Params = append(sp.Params, p)
			case dwarf.TagUnspecifiedParameters:
				sp.Varargs = true
			}
			if c.Children {
				r.SkipChildren()
			}
		}
	}
	// An out-of-line copy's parameters name their abstract ones only:
	// the origin's list is the declaration's, in order.
	if origin != nil && (len(sp.Params) == 0 || sp.Params[0].Name == "" && sp.Params[0].Type == nil) {
		sp.Params, sp.Varargs = origin.Params, origin.Varargs || sp.Varargs
	}
	return sp, nil
}
