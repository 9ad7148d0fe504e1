package main

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"
)

const completionHelp = `
Print the completion script of SHELL (bash, zsh or fish): the subcommands,
and each subcommand's flags, as its --help lists them.

Exit codes: 0; 64 usage.

Examples:
  source <(dlock completion bash)          # this bash session
  dlock completion bash > /etc/bash_completion.d/dlock
  dlock completion zsh > "${fpath[1]}/_dlock"
  dlock completion fish > ~/.config/fish/completions/dlock.fish
`

func completionMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("completion", "SHELL", completionHelp, stderr)
	if stop, code := parse(fs, args); stop {
		return code
	}
	if fs.NArg() != 1 {
		return usageError(stderr, "completion: name one shell: bash, zsh or fish")
	}
	gen, ok := map[string]func(io.Writer){"bash": bashCompletion, "zsh": zshCompletion, "fish": fishCompletion}[fs.Arg(0)]
	if !ok {
		return usageError(stderr, "completion: unknown shell %q: bash, zsh or fish", fs.Arg(0))
	}
	gen(stdout)
	return exitOK
}

// flagDoc is one flag as a subcommand's --help lists it.
type flagDoc struct{ name, usage string }

// helpText returns what `dlock NAME --help` prints.
func helpText(c command) string {
	var b bytes.Buffer
	out := helpOut
	helpOut = &b
	defer func() { helpOut = out }()
	c.run([]string{"--help"}, io.Discard, io.Discard)
	return b.String()
}

var flagLine = regexp.MustCompile(`(?m)^  --([a-z-]+).*\n\s+\t(.*)$`)

// flagsOf returns c's flags, read from its help.
func flagsOf(c command) []flagDoc {
	var flags []flagDoc
	for _, m := range flagLine.FindAllStringSubmatch(helpText(c), -1) {
		flags = append(flags, flagDoc{m[1], m[2]})
	}
	return flags
}

func bashCompletion(w io.Writer) {
	var cases strings.Builder
	for _, c := range commands {
		var flags []string
		for _, f := range flagsOf(c) {
			flags = append(flags, "--"+f.name)
		}
		fmt.Fprintf(&cases, "\t%s) flags=%q ;;\n", c.name, strings.Join(append(flags, "--help"), " "))
	}
	fmt.Fprintf(w, `# bash completion for dlock (dlock completion bash)
_dlock() {
	local cur=${COMP_WORDS[COMP_CWORD]} flags="" w
	if [[ $COMP_CWORD -eq 1 ]]; then
		COMPREPLY=($(compgen -W %q -- "$cur"))
		return
	fi
	for w in "${COMP_WORDS[@]:2:COMP_CWORD-2}"; do
		[[ $w == -- ]] && return # CMD's own words: files (-o default)
	done
	case ${COMP_WORDS[1]} in
	help) [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W %q -- "$cur")); return ;;
	completion) [[ $COMP_CWORD -eq 2 && $cur != -* ]] && { COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")); return; } ;;
	esac
	case ${COMP_WORDS[1]} in
%s	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
	fi
}
complete -o default -F _dlock dlock
`, strings.Join(append(commandNames(), "help", "--help", "--version"), " "), strings.Join(commandNames(), " "), cases.String())
}

// commandNames are the subcommands' names.
func commandNames() []string {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	return names
}

func zshCompletion(w io.Writer) {
	var cmds, cases strings.Builder
	for _, c := range commands {
		fmt.Fprintf(&cmds, "\t\t%s\n", zshQuote(c.name+":"+c.summary))
		fmt.Fprintf(&cases, "\t%s)\n\t\tflags=(\n", c.name)
		for _, f := range flagsOf(c) {
			fmt.Fprintf(&cases, "\t\t\t%s\n", zshQuote("--"+f.name+":"+f.usage))
		}
		fmt.Fprintf(&cases, "\t\t) ;;\n")
	}
	fmt.Fprintf(w, `#compdef dlock
# zsh completion for dlock (dlock completion zsh)
_dlock() {
	local -a cmds flags
	local dd=${words[(I)--]}
	cmds=(
%s	)
	if (( CURRENT == 2 )); then
		_describe 'command' cmds
		return
	fi
	if (( dd > 2 && dd < CURRENT )); then # CMD and its own words
		shift $dd words
		(( CURRENT -= dd ))
		_normal
		return
	fi
	case $words[2] in
	help) (( CURRENT == 3 )) && _describe 'command' cmds; return ;;
	completion) (( CURRENT == 3 )) && compadd bash zsh fish; return ;;
%s	esac
	if [[ $PREFIX == -* ]]; then
		_describe 'flag' flags
	else
		_files
	fi
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
	_dlock "$@" # autoloaded from fpath by the first TAB: complete it too
else
	compdef _dlock dlock
fi
`, cmds.String(), cases.String())
}

func fishCompletion(w io.Writer) {
	fmt.Fprintln(w, "# fish completion for dlock (dlock completion fish)")
	for _, c := range commands {
		fmt.Fprintf(w, "complete -c dlock -n __fish_use_subcommand -f -a %s -d %s\n", c.name, fishQuote(c.summary))
		for _, f := range flagsOf(c) {
			fmt.Fprintf(w, "complete -c dlock -n %s -l %s -d %s\n", fishQuote("__fish_seen_subcommand_from "+c.name), f.name, fishQuote(f.usage))
		}
	}
	fmt.Fprintf(w, "complete -c dlock -n __fish_use_subcommand -f -a help -d 'a command\\'s help'\n")
	fmt.Fprintf(w, "complete -c dlock -n '__fish_seen_subcommand_from help' -f -a %s\n", fishQuote(strings.Join(commandNames(), " ")))
	fmt.Fprintf(w, "complete -c dlock -n '__fish_seen_subcommand_from completion' -f -a 'bash zsh fish'\n")
}

// zshQuote quotes s for zsh, its colons in a name escaped as _describe wants.
func zshQuote(s string) string {
	name, desc, _ := strings.Cut(s, ":")
	return "'" + strings.ReplaceAll(strings.ReplaceAll(name, ":", `\:`)+":"+desc, "'", `'\''`) + "'"
}

// fishQuote quotes s for fish.
func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
