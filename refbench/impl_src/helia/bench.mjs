#!/usr/bin/env node
// refbench's Helia program: kubo's scenario steps done the way Helia's users do them, in one
// process per command (refbench times a command, as it times `ipfs add`). The repo is on disk
// under $IPFS_PATH (refbench's fresh repo per build): blocks in an FsBlockstore, the rest in a
// LevelDatastore, as Helia's own benchmarks/add-dir does it. The node starts like kubo online in
// refbench's loopback-only namespace: libp2p listening on 127.0.0.1 only, no bootstrap peers, no
// MDNS, no delegated HTTP routers, no gateways, no UPnP/AutoNAT/AutoTLS/relay.
//
//   add [-r] [--pin=false] [--cid-version=N] [--raw-leaves[=BOOL]] [--chunker=size-N] [--max-links=N] PATH
//       prints the root CID (a directory is added as kubo's `add -r` adds it: the directory is the root)
//   get CID OUT      writes the file or tree under OUT        cat CID    writes the file to stdout
//   settings [add flags]   prints the add settings in effect (JSON), without starting a node
// Add settings are Helia's defaults (@helia/unixfs: CIDv1, raw leaves, 1 MiB chunks, 1024 links),
// then HELIA_CID_VERSION / HELIA_RAW_LEAVES / HELIA_CHUNK_SIZE / HELIA_MAX_LINKS / HELIA_SHARD_SPLIT
// (a named variant's environment), then the flags.
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import nodePath from 'node:path'
import { pipeline } from 'node:stream/promises'
import { Readable } from 'node:stream'
import { Helia } from '@helia/utils'
import { bitswap } from '@helia/block-brokers'
import { libp2pRouting } from '@helia/routers'
import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { kadDHT } from '@libp2p/kad-dht'
import { ping } from '@libp2p/ping'
import { loadOrCreateSelfKey } from '@libp2p/config'
import { unixfs, globSource } from '@helia/unixfs'
import { FsBlockstore } from 'blockstore-fs'
import { LevelDatastore } from 'datastore-level'
import { fixedSize } from 'ipfs-unixfs-importer/chunker'
import { balanced } from 'ipfs-unixfs-importer/layout'
import { CID } from 'multiformats/cid'

// Node 20 has no Promise.withResolvers (Node 22 does); libp2p's locks (mortice, it-queue) call it
// at run time. The standard's whole behaviour, given here so the pinned tree runs on Node 20.
Promise.withResolvers ??= function () {
  let resolve, reject
  const promise = new this((res, rej) => { resolve = res; reject = rej })
  return { promise, resolve, reject }
}

const HELIA_DEFAULTS = { cidVersion: 1, rawLeaves: true, chunkSize: 1048576, maxLinks: 1024, shardSplit: 'links-bytes' }

function fail (msg) {
  process.stderr.write(`helia-bench: ${msg}\n`)
  process.exit(2)
}

function bool (v, what) {
  if (v === undefined || v === '' || v === 'true' || v === '1') return true
  if (v === 'false' || v === '0') return false
  fail(`${what}: expected true or false, got ${v}`)
}

function int (v, what) {
  const n = Number(v)
  if (!Number.isInteger(n) || n < 0) fail(`${what}: expected a whole number, got ${v}`)
  return n
}

/** The add settings: Helia's defaults, then the environment, then the flags. */
function settings (flags) {
  const s = { ...HELIA_DEFAULTS }
  const env = process.env
  if (env.HELIA_CID_VERSION) s.cidVersion = int(env.HELIA_CID_VERSION, 'HELIA_CID_VERSION')
  if (env.HELIA_RAW_LEAVES) s.rawLeaves = bool(env.HELIA_RAW_LEAVES, 'HELIA_RAW_LEAVES')
  if (env.HELIA_CHUNK_SIZE) s.chunkSize = int(env.HELIA_CHUNK_SIZE, 'HELIA_CHUNK_SIZE')
  if (env.HELIA_MAX_LINKS) s.maxLinks = int(env.HELIA_MAX_LINKS, 'HELIA_MAX_LINKS')
  if (env.HELIA_SHARD_SPLIT) s.shardSplit = env.HELIA_SHARD_SPLIT
  let rawSet = false
  for (const f of flags) {
    const [k, v] = f.split(/=(.*)/s)
    if (k === '--cid-version') s.cidVersion = int(v, k)
    else if (k === '--raw-leaves') { s.rawLeaves = bool(v, k); rawSet = true }
    else if (k === '--chunker') s.chunkSize = int((v ?? '').replace(/^size-/, ''), k)
    else if (k === '--max-links') s.maxLinks = int(v, k)
    else fail(`unknown flag ${f}`)
  }
  // as in kubo: CIDv0 cannot name a raw block, so v0 means dag-pb leaves unless asked otherwise
  if (s.cidVersion === 0 && !rawSet && !process.env.HELIA_RAW_LEAVES) s.rawLeaves = false
  return s
}

function importerOptions (s) {
  return {
    cidVersion: s.cidVersion,
    rawLeaves: s.rawLeaves,
    chunker: fixedSize({ chunkSize: s.chunkSize }),
    layout: balanced({ maxChildrenPerNode: s.maxLinks }),
    shardSplitStrategy: s.shardSplit
  }
}

function repoPath () {
  const p = process.env.IPFS_PATH
  if (!p) fail('IPFS_PATH is not set (the repo: blocks/ and datastore/ under it)')
  return p
}

/** A Helia node on the repo, started like kubo online on loopback only: the node `createHelia`
 * makes (the Helia class of @helia/utils, bitswap, libp2p routing), on a libp2p of the pure-JS
 * modules of Helia's defaults (TCP, noise, yamux, identify, the DHT, ping). `createHelia` itself is
 * not loaded: its defaults load WebRTC's native addon, which only an install script (never run:
 * npm ci --ignore-scripts) would fetch, and which a loopback-only node has no use for. */
async function node () {
  const repo = repoPath()
  await fsp.mkdir(repo, { recursive: true })
  const datastore = new LevelDatastore(nodePath.join(repo, 'datastore'))
  const blockstore = new FsBlockstore(nodePath.join(repo, 'blocks'))
  await datastore.open()
  const libp2p = await createLibp2p({
    privateKey: await loadOrCreateSelfKey(datastore), // the repo's identity, as kubo keeps its own
    datastore,
    addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
    transports: [tcp()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    peerDiscovery: [], // no bootstrap peers, no MDNS
    services: { identify: identify(), dht: kadDHT({ clientMode: false }), ping: ping() },
    start: false
  })
  const helia = new Helia({
    libp2p,
    datastore,
    blockstore,
    blockBrokers: [bitswap()],
    routers: [libp2pRouting(libp2p)] // no delegated HTTP routers, no public gateways
  })
  await helia.start()
  return { helia, fs: unixfs(helia) }
}

async function add (args) {
  const flags = args.filter(a => a.startsWith('--') && !a.startsWith('--pin'))
  const pin = args.filter(a => a.startsWith('--pin')).map(a => bool(a.split('=')[1], '--pin')).pop() ?? true
  const recursive = args.includes('-r') || args.includes('--recursive')
  const paths = args.filter(a => !a.startsWith('-'))
  if (paths.length !== 1) fail('add: expected one PATH')
  const path = nodePath.resolve(paths[0])
  const st = await fsp.stat(path)
  if (st.isDirectory() && !recursive) fail(`add: ${path} is a directory (use -r)`)
  const opts = importerOptions(settings(flags))
  const { helia, fs: ufs } = await node()
  try {
    let root
    if (st.isDirectory()) {
      for await (const entry of ufs.addAll(globSource(nodePath.dirname(path), `${nodePath.basename(path)}/**/*`), opts)) {
        root = entry
      }
      if (root === undefined) {
        root = { cid: await ufs.addDirectory({ path: nodePath.basename(path) }, opts) }
      }
    } else {
      root = { cid: await ufs.addByteStream(fs.createReadStream(path), opts) } // the file's own CID, as kubo's
    }
    if (pin && !(await helia.pins.isPinned(root.cid))) { // kubo pins again without complaint
      for await (const _ of helia.pins.add(root.cid)) { /* every block of the DAG, as kubo pins */ }
    }
    process.stdout.write(`${root.cid.toString()}\n`)
  } finally {
    await helia.stop()
  }
}

async function writeTree (ufs, cid, out) {
  const stat = await ufs.stat(cid)
  if (stat.type === 'directory') {
    await fsp.mkdir(out, { recursive: true })
    for await (const entry of ufs.ls(cid)) {
      await writeTree(ufs, entry.cid, nodePath.join(out, entry.name))
    }
    return
  }
  await pipeline(Readable.from(ufs.cat(cid)), fs.createWriteStream(out))
}

async function get (args) {
  if (args.length !== 2) fail('get: expected CID OUT')
  const cid = CID.parse(args[0])
  const { helia, fs: ufs } = await node()
  try {
    await writeTree(ufs, cid, nodePath.resolve(args[1]))
  } finally {
    await helia.stop()
  }
}

async function cat (args) {
  if (args.length !== 1) fail('cat: expected CID')
  const { helia, fs: ufs } = await node()
  try {
    for await (const buf of ufs.cat(CID.parse(args[0]))) {
      if (!process.stdout.write(buf)) await new Promise(resolve => process.stdout.once('drain', resolve))
    }
  } finally {
    await helia.stop()
  }
}

const [cmd, ...rest] = process.argv.slice(2)
const commands = {
  add,
  get,
  cat,
  settings: async (flags) => { process.stdout.write(JSON.stringify(settings(flags)) + '\n') }
}
if (!(cmd in commands)) fail(`unknown command ${cmd ?? '(none)'}: expected ${Object.keys(commands).join(', ')}`)
try {
  await commands[cmd](rest)
} catch (e) {
  fail(`${cmd}: ${e.message}`)
}
