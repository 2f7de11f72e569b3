/**
 * `session`: consistent hashing on a request header (`--session-header`, default `x-session-id`), so
 * every request of a session goes to the same worker while it is a candidate. Rendezvous hashing on
 * the worker URLs: the same on every gateway replica, and when a worker leaves only its sessions
 * move (each to the worker that scored next for it). No overload gate: a session's affinity is the
 * point. A request without the header goes to the less loaded of two random candidates.
 */
import { fnv1a } from "@sluice/scheduler/core/hash.js";
import type {
  ChoiceCounter,
  RoutingCandidate,
  RoutingObserver,
  RoutingRequest,
} from "../contracts/routing-policy.js";
import { ChoiceAmongMany } from "./choice-among-many.js";
import { rendezvousPick } from "./hash.js";
import { lessLoadedOfTwo } from "./power-of-two.js";

export class SessionPolicy<W extends RoutingCandidate> extends ChoiceAmongMany<W> {
  private readonly header: string;
  private readonly hashed: ChoiceCounter;
  private readonly noSession: ChoiceCounter;

  constructor(
    header: string,
    observer: RoutingObserver,
    private readonly random: () => number = Math.random,
  ) {
    super("session", observer);
    // Node hands header names over in lowercase.
    this.header = header.toLowerCase();
    this.hashed = observer.choices(this.name, "session");
    this.noSession = observer.choices(this.name, "no_session");
  }

  protected chooseAmong(candidates: readonly W[], request: RoutingRequest): W | undefined {
    const key = request.header(this.header);
    if (key === undefined || key === "") {
      this.noSession.inc();
      return lessLoadedOfTwo(candidates, this.random);
    }
    this.hashed.inc();
    return rendezvousPick(candidates, fnv1a(key));
  }
}
