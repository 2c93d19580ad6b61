"""Compares two run trees written by runs.sh (before/ and after/ a change): JSON with the timing
fields dropped and the tree's own path replaced, text with durations masked, every other file
byte for byte. Usage: python3 compare.py [--model-record] BEFORE_DIR AFTER_DIR

--model-record: compare model records without the fields that say how the layers attend (the flat
window fields before, `arch` and `layers` since the record holds the whole decoder config)."""
import json,os,re,sys
args=sys.argv[1:]
MODEL_RECORD='--model-record' in args
args=[a for a in args if a!='--model-record']
B,A=os.path.abspath(args[0]),os.path.abspath(args[1])
LAYOUT=('arch','layers','window','windowed_layers','nope_layers','learned_sinks')
TIMING=re.compile(r'(seconds|tokens_per_s|wall|elapsed|rss|_s$|^s$|timestamp|per_s)')
def strip(x):
    if isinstance(x,dict):
        layout=MODEL_RECORD and 'n_kv_heads' in x
        return {k:strip(v) for k,v in x.items() if not TIMING.search(k) and not (layout and k in LAYOUT)}
    if isinstance(x,list): return [strip(v) for v in x]
    return x
def text(p):
    t=open(p,errors='replace').read().replace(B,A)
    t=re.sub(r'\d+(\.\d+)?\s?(s|ms|min)\b','T',t); t=re.sub(r'[\d.]+ tokens/s','T',t); t=re.sub(r'peak RSS [\d.]+ \w+','RSS',t)
    t=re.sub(r'\d+(\.\d+)? MiB','M',t)
    return t
same=diff=0
for root,_,files in os.walk(B):
    for f in files:
        pb=os.path.join(root,f); pa=pb.replace(B,A)
        if not os.path.exists(pa): print('missing after',pa); diff+=1; continue
        if f.endswith('.json') or f.endswith('.jsonl'):
            try:
                lb=[strip(json.loads(l.replace(B,A))) for l in open(pb).read().splitlines() if l.strip()] if f.endswith('l') else strip(json.loads(open(pb).read().replace(B,A)))
                la=[strip(json.loads(l)) for l in open(pa).read().splitlines() if l.strip()] if f.endswith('l') else strip(json.loads(open(pa).read()))
            except Exception as e: print('parse',pb,e); diff+=1; continue
            ok=lb==la
        elif f.endswith(('.txt','.md','.svg')): ok=text(pb)==text(pa)
        else: ok=open(pb,'rb').read()==open(pa,'rb').read()
        if ok: same+=1
        else: diff+=1; print('DIFF',pb)
print('same',same,'differ',diff)
sys.exit(1 if diff else 0)
